// Untrusted Markdown (model answers) to inert DOM. Three layers:
// 1. marked parses, with a renderer that never passes raw HTML (it is shown
//    as text), never makes an <img> (an image becomes a label: nothing is
//    fetched), and keeps only http(s) and mailto links, each marked with the
//    host it leads to; a relative link becomes a workspace-file link for the
//    viewer; any other scheme (javascript:, data:, file:) becomes plain text.
// 2. DOMPurify sanitises the result against a short allowlist of tags and
//    attributes (no forms, buttons, inputs, styles, ids or event handlers:
//    nothing that can run script or pass for the page's own controls) and
//    returns a DocumentFragment, never an HTML string.
// 3. The page's Content-Security-Policy (no inline script, Trusted Types, no
//    remote images) holds even if a layer above slipped.
// Code is coloured by highlight.js, whose output is sanitised the same way.
"use strict";

window.CapstanMarkdown = (() => {
  const TAGS = ["p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "s",
    "code", "pre", "blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td",
    "a", "span", "sup", "sub"];
  const ATTRS = ["href", "title", "class", "target", "rel", "align", "start", "data-file", "data-lang"];
  const OUR_CLASSES = new Set(["external", "link-host", "md-image", "unsafe-link", "file-link"]);
  // highlight.js classes: `hljs-keyword`, and scope suffixes such as `function_`.
  const HLJS_CLASS = /^(hljs(-[\w-]+)?|[a-z]+_+)$/;

  DOMPurify.addHook("uponSanitizeAttribute", (_node, data) => {
    if (data.attrName === "class") {
      data.keepAttr = data.attrValue.split(/\s+/).filter(Boolean)
        .every((c) => OUR_CLASSES.has(c) || HLJS_CLASS.test(c));
    }
  });

  const purify = (html) => DOMPurify.sanitize(html, {
    ALLOWED_TAGS: TAGS,
    ALLOWED_ATTR: ATTRS,
    // Applies to href only: the other attributes are words, not addresses.
    ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
    ADD_URI_SAFE_ATTR: ["target", "rel", "align", "start", "data-file", "data-lang"],
    ALLOW_DATA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  });

  const escape = (s) => String(s).replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

  // Where a link may go: another site (marked), mail, a workspace file, or nowhere.
  function classify(href) {
    const raw = String(href || "").trim();
    if (/^[a-z][a-z0-9+.-]*:/i.test(raw)) {
      let url;
      try { url = new URL(raw); } catch (_) { return { kind: "unsafe" }; }
      if (url.protocol === "http:" || url.protocol === "https:") return { kind: "external", url };
      if (url.protocol === "mailto:") return { kind: "mail", url };
      return { kind: "unsafe" };
    }
    // No scheme: a path in the workspace, as citations name files.
    const path = raw.split("#")[0].replace(/^\.\//, "");
    if (path && !path.startsWith("/") && !path.startsWith("\\") && !path.split(/[\\/]/).includes("..")) {
      return { kind: "file", path: decodeSafe(path) };
    }
    return { kind: "unsafe" };
  }

  function decodeSafe(s) {
    try { return decodeURIComponent(s); } catch (_) { return s; }
  }

  // `breaks`: a single newline is a line break, as in chat; answers written
  // as plain lines (the offline answerer's) keep their shape.
  const md = new marked.Marked({ gfm: true, breaks: true, async: false });
  md.use({
    renderer: {
      html(token) {
        return escape(token.text);
      },
      image(token) {
        return `<span class="md-image" title="Images in answers are not loaded">image: ${escape(token.text || "untitled")}</span>`;
      },
      link(token) {
        const text = this.parser.parseInline(token.tokens);
        const to = classify(token.href);
        const title = token.title ? ` title="${escape(token.title)}"` : "";
        switch (to.kind) {
          case "external":
            return `<a class="external" href="${escape(to.url.href)}" target="_blank" rel="noopener noreferrer nofollow"${title}>${text}</a>`
              + `<span class="link-host" title="This link leaves Capstan">↗ ${escape(to.url.host)}</span>`;
          case "mail":
            return `<a class="external" href="${escape(to.url.href)}"${title}>${text}</a>`;
          case "file":
            return `<a class="file-link" href="#" data-file="${escape(to.path)}"${title}>${text}</a>`;
          default:
            return `<span class="unsafe-link" title="Link removed: it could run code or leave the page">${text}</span>`;
        }
      },
      code(token) {
        const lang = /^[\w+#.-]{1,24}$/.test(token.lang || "") ? token.lang : "";
        return `<pre><code data-lang="${escape(lang)}">${escape(token.text)}</code></pre>`;
      },
    },
  });

  // Colours one code block in place. Only highlight.js's own <span class>
  // markup survives the sanitiser; the code text stays text.
  function highlight(code) {
    const lang = code.dataset.lang;
    if (!lang || !hljs.getLanguage(lang)) return;
    const html = hljs.highlight(code.textContent, { language: lang, ignoreIllegals: true }).value;
    code.replaceChildren(purify(html));
    code.classList.add("hljs");
  }

  // `[n]` in text (not in code or links) for each cited n.
  function linkMarkers(root, cited, makeLink) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: (n) => (n.parentElement?.closest("code, pre, a") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
    });
    const nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    for (const node of nodes) {
      const parts = node.data.split(/(\[\d+\])/);
      if (parts.length === 1) continue;
      const out = parts.map((p) => {
        const m = /^\[(\d+)\]$/.exec(p);
        return m && cited.has(Number(m[1])) ? makeLink(Number(m[1])) : document.createTextNode(p);
      });
      node.replaceWith(...out);
    }
  }

  // The answer's own "Sources:" list repeats the citation list under it: cut
  // a final Sources section whose lines are only `[n] ...` entries.
  function stripSources(text) {
    const lines = text.split("\n");
    for (let i = lines.length - 1; i >= 0; i--) {
      const m = /^\s*(?:#{1,6}\s*)?(?:\*\*|__)?sources?(?:\*\*|__)?\s*:?\s*(?:\*\*|__)?\s*(.*)$/i.exec(lines[i]);
      if (!m) continue;
      const inline = m[1].trim();
      const rest = lines.slice(i + 1).filter((l) => l.trim());
      const listy = rest.every((l) => /^\s*(?:[-*+]\s*|\d+[.)]\s*)?\[\d+\]/.test(l));
      if (listy && (inline === "" || /^\[\d+\]/.test(inline))) return lines.slice(0, i).join("\n").trimEnd();
      return text;
    }
    return text;
  }

  // Markdown text to a fragment. `cited` is the set of citation numbers;
  // `makeLink(n)` builds the page's own link for marker n.
  function render(text, cited = new Set(), makeLink = null) {
    const source = cited.size ? stripSources(text) : text;
    const frag = purify(md.parse(source));
    for (const code of frag.querySelectorAll("pre > code")) highlight(code);
    if (makeLink && cited.size) linkMarkers(frag, cited, makeLink);
    return frag;
  }

  return { render, stripSources, classify };
})();
