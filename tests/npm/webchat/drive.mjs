// Drives the web chat of `capstan serve` in headless Chromium (Debian's
// /usr/bin/chromium through playwright-core). Two servers:
// - the offline model (<chat-url>): pick a workspace, ask a question and watch
//   the answer stream in, answer an approval with the keyboard, expand the
//   step trace, cancel a long command with Esc, rename, search and delete
//   sessions; the 390 px and dark layouts; axe-core audits;
// - a scripted model (<md-url>) whose answer is hostile Markdown: headings,
//   a code block, a table, citations, plus <script>, an onerror image,
//   javascript: links and remote images that must stay inert; a citation and
//   a hostile workspace file opened in the side viewer.
// Every request the browser makes is recorded: none may leave the server's
// origin. Saves screenshots; prints one JSON summary on stdout.
//
// usage: node drive.mjs <chat-url> <workspace> <artifacts-dir> <unregistered-dir> <md-url>
// (the URLs are the `http://127.0.0.1:PORT/?token=...` capstan serve printed)
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { launchChromium } from "./browser.mjs";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const [startUrl, workspace, artifacts, unregistered, mdUrl] = process.argv.slice(2);
const browser = await launchChromium();
const summary = { errors: [], dialogs: [], requests: [], cspViolations: [] };
const origins = [new URL(startUrl).origin, new URL(mdUrl).origin];

function watch(page) {
  current = page;
  page.setDefaultTimeout(60_000);
  page.on("pageerror", (e) => summary.errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    // The policy refusing something is what it is for; report it separately.
    if (/Content Security Policy|Trusted Type/i.test(m.text())) summary.cspViolations.push(m.text());
    else summary.errors.push(m.text());
  });
  page.on("dialog", async (d) => { summary.dialogs.push(d.message()); await d.dismiss(); });
  page.on("request", (r) => {
    const url = r.url();
    if (!origins.some((o) => url.startsWith(`${o}/`)) && !url.startsWith("data:")) summary.requests.push(url);
  });
}

// The page in use, for a screenshot when a step fails.
let current = null;

const overflow = (page) => page.evaluate(() => ({
  scrollWidth: document.documentElement.scrollWidth,
  innerWidth: window.innerWidth,
}));

async function audit(page) {
  await page.evaluate(axeSource);
  return page.evaluate(async () => {
    const r = await axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")).slice(0, 5) }));
  });
}

try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"]);
  const page = await context.newPage();
  watch(page);
  const last = "#messages > li.assistant:last-child";
  // The phone's shots show the screen as a person sees it (a full-page shot
// would paint the sticky header and fixed composer mid-page).
const shot = (name, p = page, fullPage = true) => p.screenshot({ path: `${artifacts}/webchat-${name}.png`, fullPage });

  // The start-up URL: the token becomes an HttpOnly cookie and leaves the address bar.
  await page.goto(startUrl);
  await page.waitForFunction(() => !location.search.includes("token"));
  const cookies = await context.cookies(new URL(startUrl).origin);
  summary.auth = {
    url: page.url(),
    cookies: cookies.map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite })),
    scriptSeesCookie: await page.evaluate(() => document.cookie.includes("capstan_token")),
  };
  const headers = (await page.request.get(new URL("/", startUrl).href)).headers();
  summary.csp = headers["content-security-policy"];
  // The composer has focus on load; the server's `-w` folder is selected.
  await page.waitForFunction(() => document.querySelector("#workspace").value !== "");
  summary.focusOnLoad = await page.evaluate(() => document.activeElement.id);
  summary.workspace = await page.inputValue("#workspace");
  summary.profile = await page.textContent("#profile");
  // The first Tab stop is the skip link, and it leads to the message box.
  await page.evaluate(() => { document.body.tabIndex = -1; document.body.focus(); document.body.removeAttribute("tabindex"); });
  await page.keyboard.press("Tab");
  summary.firstTab = await page.evaluate(() => document.activeElement.textContent.trim());
  await page.keyboard.press("Enter");
  summary.skipTarget = await page.evaluate(() => document.activeElement.id);

  // A folder nobody registered is refused, with the way to register it.
  await page.click(".add-workspace summary");
  await page.fill("#workspace-path", unregistered);
  await page.click("#add-workspace button");
  await page.waitForFunction(() => document.querySelector("#status").textContent.includes("could not use"));
  summary.unregistered = await page.textContent("#status");
  await page.fill("#workspace-path", workspace);
  await page.click("#add-workspace button");
  await page.waitForFunction(() => document.querySelector("#status").textContent.includes("selected"));

  // Count how many times the answer changes while it streams.
  await page.evaluate(() => {
    window.answerUpdates = 0;
    new MutationObserver((records) => {
      for (const r of records) {
        if (r.target.closest?.(".answer") || r.target.parentElement?.closest(".answer")) window.answerUpdates += 1;
      }
    }).observe(document.querySelector("#messages"), { subtree: true, childList: true, characterData: true });
  });

  // 1. A question, sent with the keyboard (Shift+Enter is a new line, Enter sends).
  await page.focus("#message");
  await page.keyboard.type("How do I rotate");
  await page.keyboard.press("Shift+Enter");
  summary.shiftEnterKeepsText = await page.inputValue("#message");
  await page.fill("#message", "How do I rotate the signing keys?");
  await page.press("#message", "Enter");
  await page.waitForSelector(`${last} .run-status:has-text("completed")`);
  summary.question = {
    answer: await page.textContent(`${last} .answer`),
    updates: await page.evaluate(() => window.answerUpdates),
    feed: await page.$$eval(`${last} .activity li`, (ls) => ls.map((l) => l.textContent)),
    feedOpen: await page.$eval(`${last} .feed`, (d) => d.open),
    feedSummary: await page.textContent(`${last} .feed summary`),
    citations: await page.$$eval(`${last} .citations li`, (ls) => ls.map((l) => l.textContent)),
    status: await page.textContent(`${last} .run-status`),
  };
  await page.click(`${last} .feed summary`);
  summary.question.feedExpands = await page.$eval(`${last} .feed`, (d) => d.open);
  await shot("answer");

  // 2. A command that needs approval, answered with the keyboard: the card
  // takes focus, Tab reaches Approve, Enter presses it.
  await page.fill("#message", "run `make check`");
  await page.press("#message", "Enter");
  await page.waitForSelector(`${last} .approval button:has-text("Approve")`);
  await page.waitForFunction(() => document.activeElement?.classList.contains("approval"));
  summary.approvalPrompt = await page.textContent(`${last} .approval`);
  summary.approvalReasons = await page.$$eval(`${last} .approval li`, (ls) => ls.map((l) => l.textContent));
  await shot("approval");
  await page.keyboard.press("Tab");
  summary.tabbedTo = await page.evaluate(() => document.activeElement.textContent);
  await page.keyboard.press("Enter");
  await page.waitForSelector(`${last} .run-status:has-text("completed")`);
  summary.decision = await page.textContent(`${last} .approval .decision`);
  summary.buttonsAfterDecision = await page.$$eval(`${last} .approval button`, (bs) => bs.length);
  summary.taskBadge = await page.textContent("#plan-tasks li .badge");
  summary.traceVisibleBefore = await page.isVisible("#plan-tasks .trace pre");
  await page.click("#plan-tasks li summary");
  await page.waitForSelector("#plan-tasks li details[open] .trace pre");
  summary.trace = {
    command: await page.textContent("#plan-tasks .trace .step-head code"),
    output: await page.textContent("#plan-tasks .trace pre"),
    grant: await page.textContent("#plan-tasks .trace .grant"),
    outputFont: await page.$eval("#plan-tasks .trace pre", (p) => getComputedStyle(p).fontFamily),
    outputTimes: await page.evaluate(() => {
      const out = document.querySelector("#plan-tasks .trace pre").textContent.trim().split("\n").pop();
      return [...document.querySelectorAll("#plan-tasks .trace *")].filter((n) => n.children.length === 0 && n.textContent.includes(out)).length;
    }),
  };
  summary.approvalFeed = await page.$$eval(`${last} .activity li`, (ls) => ls.map((l) => l.textContent));
  await shot("trace");

  // 3. Cancel a long command with Esc.
  await page.fill("#message", "run `sleep 60`");
  await page.press("#message", "Enter");
  await page.waitForSelector("#plan-tasks .badge.running");
  await page.waitForSelector("#cancel:not([disabled])");
  await page.keyboard.press("Escape");
  await page.waitForSelector(`${last} .run-status:has-text("cancelled")`);
  summary.cancel = {
    status: await page.textContent(`${last} .run-status`),
    sendEnabled: await page.isEnabled("#send"),
    cancelEnabled: await page.isEnabled("#cancel"),
  };
  await shot("cancelled");
  summary.audit = { desktopLight: await audit(page) };

  // Sessions: one session so far; a second one, then rename, search, delete.
  summary.sessions = await page.$$eval("#sessions li.session", (ls) => ls.length);
  summary.sessionGroups = await page.$$eval("#sessions h3", (hs) => hs.map((h) => h.textContent));
  summary.sessionTitle = await page.textContent("#sessions li.session .session-title");
  summary.sessionDate = await page.getAttribute("#sessions li.session time", "datetime");
  await page.click("#new-chat");
  await page.fill("#message", "Where is the on-call guide?");
  await page.press("#message", "Enter");
  // Completed or failed (the offline model may find too little): either ends the run.
  await page.waitForSelector(`${last} .run-status:not(:empty)`);
  await page.waitForFunction(() => document.querySelectorAll("#sessions li.session").length === 2);
  const first = "#sessions li.session:has-text('rotate')";
  await page.hover(first);
  await page.click(`${first} button[aria-label^="Rename"]`);
  await page.fill("#sessions input.rename", "Key rotation notes");
  await page.press("#sessions input.rename", "Enter");
  await page.waitForSelector("#sessions li.session:has-text('Key rotation notes')");
  await page.fill("#session-search", "on-call");
  await page.waitForFunction(() => document.querySelectorAll("#sessions li.session").length === 1);
  summary.searchHit = await page.textContent("#sessions li.session .session-title");
  await page.fill("#session-search", "");
  await page.waitForFunction(() => document.querySelectorAll("#sessions li.session").length === 2);
  const doomed = "#sessions li.session:has-text('on-call')";
  await page.hover(doomed);
  await page.click(`${doomed} button[aria-label^="Delete"]`);
  await page.click("#sessions .confirm button.danger");
  await page.waitForFunction(() => document.querySelectorAll("#sessions li.session").length === 1);
  summary.afterDelete = await page.$$eval("#sessions li.session .session-title", (ts) => ts.map((t) => t.textContent));
  // Opening the kept session replays its runs: the answers, citations and feeds come back.
  await page.click("#sessions li.session .session-open");
  await page.waitForFunction(() => document.querySelectorAll("#messages .citations li").length > 0);
  summary.reopened = {
    messages: await page.$$eval("#messages > li", (ls) => ls.length),
    feedsOpen: await page.$$eval("#messages .feed", (ds) => ds.filter((d) => d.open).length),
  };

  // Dark (system setting) at full width.
  await page.emulateMedia({ colorScheme: "dark" });
  summary.darkBackground = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await shot("dark");
  summary.audit.desktopDark = await audit(page);
  // The toggle overrides the system: dark → light.
  await page.click("#theme-toggle");
  await page.click("#theme-toggle");
  summary.toggledTheme = await page.evaluate(() => document.documentElement.dataset.theme);
  summary.toggledBackground = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.click("#theme-toggle");
  await context.close();

  // A phone: 390 px wide, dark, the same session.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: "dark", reducedMotion: "reduce", isMobile: true, hasTouch: true });
  const mobile = await phone.newPage();
  watch(mobile);
  await mobile.goto(startUrl);
  await mobile.waitForFunction(() => document.querySelector("#workspace").value !== "");
  summary.phone = { empty: await overflow(mobile) };
  await mobile.click("#drawer-open");
  await mobile.waitForSelector("#sidebar li.session", { state: "visible" });
  summary.phone.drawer = await overflow(mobile);
  await shot("390-drawer", mobile, false);
  await mobile.click("#sidebar li.session .session-open");
  await mobile.waitForFunction(() => document.querySelectorAll("#messages .citations li").length > 0);
  await mobile.waitForFunction(() => !document.body.classList.contains("drawer-open"));
  summary.phone.session = await overflow(mobile);
  summary.phone.composer = await mobile.$eval("#composer", (f) => {
    const r = f.getBoundingClientRect();
    return { position: getComputedStyle(f).position, bottom: Math.round(r.bottom), height: window.innerHeight };
  });
  // Waited for, not read once: the replayed session may still be laying out
  // right after the drawer closes. A plan that never sits below the messages
  // still fails (false after the timeout).
  summary.phone.planBelowMessages = await mobile
    .waitForFunction(() => {
      const m = document.querySelector("#messages").getBoundingClientRect();
      const p = document.querySelector("#plan").getBoundingClientRect();
      return p.top >= m.bottom - 1;
    }, null, { timeout: 5000 })
    .then(() => true, () => false);
  await shot("390-dark", mobile, false);
  summary.audit.phoneDark = await audit(mobile);
  await phone.close();

  // The scripted model: Markdown, hostile content, citations, the viewer.
  const mdContext = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await mdContext.grantPermissions(["clipboard-read", "clipboard-write"]);
  const md = await mdContext.newPage();
  watch(md);
  await md.goto(mdUrl);
  await md.waitForFunction(() => document.querySelector("#workspace").value !== "");
  await md.fill("#message", "How do I rotate the signing keys? Show me the steps.");
  await md.press("#message", "Enter");
  // While it streams, the heading is already rendered.
  await md.waitForSelector(`${last} .answer h2`);
  summary.md = { headingWhileStreaming: await md.$eval(`${last} .run-status`, (s) => s.textContent === "") };
  await md.waitForSelector(`${last} .run-status:has-text("completed")`);
  const answer = `${last} .answer`;
  Object.assign(summary.md, {
    heading: await md.textContent(`${answer} h2`),
    codeLang: await md.getAttribute(`${answer} pre code`, "data-lang"),
    codeText: await md.textContent(`${answer} pre code`),
    highlighted: await md.$$eval(`${answer} pre code span[class^="hljs-"]`, (s) => s.length),
    tableCells: await md.$$eval(`${answer} table td`, (tds) => tds.map((t) => t.textContent)),
    tableHeader: await md.$$eval(`${answer} table th`, (ths) => ths.map((t) => t.textContent)),
    scripts: await md.$$eval(`${answer} script, ${answer} img, ${answer} iframe, ${answer} form, ${answer} button:not(.copy-code)`, (n) => n.length),
    handlers: await md.$$eval(`${answer} *`, (ns) => ns.filter((n) => [...n.attributes].some((a) => a.name.startsWith("on"))).length),
    hrefs: await md.$$eval(`${answer} a[href]`, (as) => as.map((a) => a.getAttribute("href"))),
    pwned: await md.evaluate(() => window.__pwned === true),
    shownAsText: await md.textContent(answer),
    external: await md.$$eval(`${answer} a.external`, (as) => as.map((a) => ({ href: a.href, target: a.target, rel: a.rel, host: a.nextElementSibling?.textContent }))),
    markers: await md.$$eval(`${answer} a.cite`, (as) => as.map((a) => a.textContent)),
    citations: await md.$$eval(`${last} .citations li`, (ls) => ls.map((l) => l.textContent)),
  });
  // Copy buttons: the code block's and the whole answer's.
  await md.click(`${answer} .copy-code`);
  summary.md.copiedCode = await md.evaluate(() => navigator.clipboard.readText());
  await md.click(`${last} .copy-answer`);
  summary.md.copiedAnswer = await md.evaluate(() => navigator.clipboard.readText());
  await shot("markdown", md);

  // A [n] marker opens the cited lines in the side viewer.
  await md.click(`${answer} a.cite >> nth=0`);
  await md.waitForSelector("#viewer-lines li.cited");
  summary.md.viewer = {
    title: await md.textContent("#viewer-title"),
    cited: await md.$$eval("#viewer-lines li.cited", (ls) => ls.map((l) => ({ n: Number(l.value), text: l.textContent }))),
    focus: await md.evaluate(() => document.activeElement.id),
  };
  await shot("viewer", md);
  await md.keyboard.press("Escape");
  summary.md.viewerClosed = await md.isHidden("#viewer");
  // The citation list's entry opens the same lines.
  await md.click(`${last} .citations a >> nth=0`);
  await md.waitForSelector("#viewer-lines li.cited");
  summary.md.listOpens = await md.textContent("#viewer-title");
  await md.click("#viewer-close");
  // A hostile workspace file, linked from the answer, shows as text.
  await md.click(`${answer} a.file-link`);
  await md.waitForFunction(() => document.querySelectorAll("#viewer-lines li").length > 0);
  summary.md.hostileFile = {
    text: await md.$$eval("#viewer-lines li", (ls) => ls.map((l) => l.textContent)),
    elements: await md.$$eval("#viewer-lines script, #viewer-lines img, #viewer-lines a", (n) => n.length),
  };
  await shot("hostile-file", md);
  summary.audit.markdown = await audit(md);
  await mdContext.close();
} catch (e) {
  // Say where it stopped, with a picture of the page at that moment.
  if (current) await current.screenshot({ path: `${artifacts}/webchat-failure.png`, fullPage: true }).catch(() => {});
  process.stderr.write(`summary so far: ${JSON.stringify(summary)}\n`);
  throw e;
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(summary) + "\n");
