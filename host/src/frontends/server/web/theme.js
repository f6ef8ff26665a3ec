// Runs before the first paint (a plain <script> in <head>; the page's policy
// allows no inline script): applies the theme the user chose with the toggle.
// Without a choice the page follows the system (prefers-color-scheme).
"use strict";
(() => {
  const chosen = localStorage.getItem("capstan-theme");
  if (chosen === "dark" || chosen === "light") document.documentElement.dataset.theme = chosen;
})();
