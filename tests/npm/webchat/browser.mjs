// What every web chat driver shares: Debian's Chromium, headless, where no
// name resolves (a request meant for another host fails on this machine),
// and a page watcher that collects page errors, console errors and dialogs.
import { chromium } from "playwright-core";

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"],
  });
}

// Collects `page`'s errors and dialogs (dismissed) into `summary.errors` and
// `summary.dialogs`.
export function watchPage(page, summary) {
  page.setDefaultTimeout(60_000);
  page.on("pageerror", (e) => summary.errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") summary.errors.push(m.text()); });
  page.on("dialog", async (d) => { summary.dialogs.push(d.message()); await d.dismiss(); });
}
