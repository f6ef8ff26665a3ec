// Drives the web chat of `capstan serve` in headless Chromium (Debian's
// /usr/bin/chromium through playwright-core): pick a workspace, ask a question
// and watch the answer stream in, approve a command and expand its step trace,
// cancel a long command. Saves screenshots; prints one JSON summary on stdout.
//
// usage: node drive.mjs <start-up-url> <workspace> <artifacts-dir> <unregistered-dir>
// (<start-up-url> is the `http://127.0.0.1:PORT/?token=...` capstan serve printed)
import { chromium } from "playwright-core";

const [startUrl, workspace, artifacts, unregistered] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
const summary = { errors: [] };
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(90_000);
  page.on("pageerror", (e) => summary.errors.push(String(e)));
  page.on("console", (m) => m.type() === "error" && summary.errors.push(m.text()));
  const last = "#messages > li.assistant:last-child";
  const shot = (name) => page.screenshot({ path: `${artifacts}/webchat-${name}.png`, fullPage: true });

  // The start-up URL: the token becomes an HttpOnly cookie and leaves the address bar.
  await page.goto(startUrl);
  await page.waitForFunction(() => !location.search.includes("token"));
  const cookies = await context.cookies();
  summary.auth = {
    url: page.url(),
    cookies: cookies.map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite })),
    scriptSeesCookie: await page.evaluate(() => document.cookie.includes("capstan_token")),
  };
  // A folder nobody registered is refused, with the way to register it.
  await page.fill("#workspace-path", unregistered);
  await page.click("#add-workspace button");
  await page.waitForFunction(() => document.querySelector("#status").textContent.includes("could not use"));
  summary.unregistered = await page.textContent("#status");
  // The workspace picker: the registered folder becomes the selection.
  await page.fill("#workspace-path", workspace);
  await page.click("#add-workspace button");
  await page.waitForFunction(() => document.querySelector("#workspace").value !== "");
  summary.workspace = await page.inputValue("#workspace");
  summary.profile = await page.textContent("#profile");

  // Count how many times each answer's text changes while it streams.
  await page.evaluate(() => {
    window.answerUpdates = 0;
    new MutationObserver((records) => {
      for (const r of records) {
        if (r.target.classList?.contains("answer") || r.target.parentElement?.classList.contains("answer")) {
          window.answerUpdates += 1;
        }
      }
    }).observe(document.querySelector("#messages"), { subtree: true, childList: true, characterData: true });
  });

  // 1. A question, sent with the keyboard.
  await page.fill("#message", "How do I rotate the signing keys?");
  await page.press("#message", "Enter");
  await page.waitForSelector(`${last} .run-status:has-text("completed")`);
  summary.question = {
    answer: await page.textContent(`${last} .answer`),
    updates: await page.evaluate(() => window.answerUpdates),
    feed: await page.$$eval(`${last} .activity li`, (ls) => ls.map((l) => l.textContent)),
    citations: await page.$$eval(`${last} .citations li`, (ls) => ls.map((l) => l.textContent)),
    status: await page.textContent(`${last} .run-status`),
  };
  await shot("answer");

  // 2. A command that needs approval; then its step trace.
  await page.fill("#message", "run `make check`");
  await page.click("#send");
  await page.waitForSelector(`${last} .approval button:has-text("Approve")`);
  summary.approvalPrompt = await page.textContent(`${last} .approval`);
  await shot("approval");
  await page.click(`${last} .approval button:has-text("Approve")`);
  await page.waitForSelector(`${last} .run-status:has-text("completed")`);
  summary.decision = await page.textContent(`${last} .approval .decision`);
  summary.taskBadge = await page.textContent("#plan-tasks li .badge");
  summary.traceVisibleBefore = await page.isVisible("#plan-tasks .trace pre");
  await page.click("#plan-tasks li summary");
  await page.waitForSelector("#plan-tasks li details[open] .trace pre");
  summary.trace = {
    command: await page.textContent("#plan-tasks .trace .step-head code"),
    output: await page.textContent("#plan-tasks .trace pre"),
  };
  summary.approvalFeed = await page.$$eval(`${last} .activity li`, (ls) => ls.map((l) => l.textContent));
  await shot("trace");

  // 3. Cancel a long command.
  await page.fill("#message", "run `sleep 60`");
  await page.click("#send");
  await page.waitForSelector("#plan-tasks .badge.running");
  await page.waitForSelector("#cancel:not([disabled])");
  await page.click("#cancel");
  await page.waitForSelector(`${last} .run-status:has-text("cancelled")`);
  summary.cancel = {
    status: await page.textContent(`${last} .run-status`),
    sendEnabled: await page.isEnabled("#send"),
    cancelEnabled: await page.isEnabled("#cancel"),
  };
  await shot("cancelled");

  summary.sessions = await page.$$eval("#sessions li", (ls) => ls.length);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(summary) + "\n");
