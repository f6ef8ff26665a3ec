// Drives the web chat's network approval in headless Chromium: a command
// reaches a host no [network] rule names, the page shows the approval with
// "Always for this workspace (<rule>)", the driver clicks it, and the command
// finishes with the host's answer in its step trace. A second command to the
// same host then runs without an approval card. Prints one JSON summary on
// stdout; screenshots go to <artifacts-dir>/webchat-network-*.png.
//
// usage: node always.mjs <chat-url> <command> <artifacts-dir>
import { launchChromium, watchPage } from "./browser.mjs";

const [startUrl, command, artifacts] = process.argv.slice(2);
const browser = await launchChromium();
const summary = { errors: [], dialogs: [] };
let page = null;

const shot = (name) => page.screenshot({ path: `${artifacts}/webchat-network-${name}.png`, fullPage: true });
const last = "#messages > li.assistant:last-child";

// The plan panel's task, opened: its steps' output and its notes (the
// network.connect lines among them).
async function trace() {
  await page.click("#plan-tasks li summary");
  await page.waitForSelector("#plan-tasks li details[open] .trace pre");
  return {
    output: await page.$$eval("#plan-tasks .trace .step pre", (ps) => ps.map((p) => p.textContent)),
    notes: await page.$$eval("#plan-tasks .trace .note", (ns) => ns.map((n) => n.textContent)),
  };
}

async function send(text) {
  await page.fill("#message", text);
  await page.press("#message", "Enter");
}

try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await context.newPage();
  watchPage(page, summary);
  await page.goto(startUrl);
  await page.waitForFunction(() => document.querySelector("#workspace").value !== "");

  // 1. The connection asks; the card offers the rule; "always" is clicked.
  await send(`run \`${command}\``);
  const card = `${last} .approval`;
  await page.waitForSelector(`${card} button:has-text("Always for this workspace")`);
  summary.card = await page.$eval(card, (c) => ({
    title: c.querySelector(".approval-title").textContent,
    command: c.querySelector(".approval-command").textContent,
    reasons: [...c.querySelectorAll("li")].map((l) => l.textContent),
    buttons: [...c.querySelectorAll("button")].map((b) => b.textContent),
  }));
  await shot("asked");
  await page.click(`${card} button:has-text("Always for this workspace")`);
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.startsWith("approved"), `${card} .decision`);
  summary.decision = await page.$eval(`${card} .decision`, (d) => d.textContent);
  await page.waitForSelector(`${last} .run-status:has-text("completed")`);
  summary.trace = await trace();
  await shot("always");

  // 2. The same host again: the rule is in the user's capstan.toml, no card.
  await send(`run \`${command}\``);
  await page.waitForSelector(`${last} .run-status:has-text("completed")`);
  summary.again = {
    cards: await page.$$eval(`${last} .approval`, (cs) => cs.length),
    trace: await trace(),
  };
  await shot("again");
  await context.close();
} catch (e) {
  if (page) await page.screenshot({ path: `${artifacts}/webchat-network-failure.png`, fullPage: true }).catch(() => {});
  process.stderr.write(`summary so far: ${JSON.stringify(summary)}\n`);
  throw e;
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(summary) + "\n");
