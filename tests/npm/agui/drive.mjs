// Drives `capstan serve`'s AG-UI endpoint with the official client
// (@ag-ui/client's HttpAgent, which verifies the event sequence and validates
// every event against the protocol's schemas). Any deviation the client warns
// about ("[ag-ui]") fails the run. Prints one JSON summary on stdout.
//
// usage: CAPSTAN_TOKEN=<server token> node drive.mjs <base-url> <workspace>
import { HttpAgent, buildResumeArray } from "@ag-ui/client";
import { EventSchemas } from "@ag-ui/core/schemas";
import { randomUUID } from "node:crypto";

const [base, workspace] = process.argv.slice(2);
const url = `${base}/agui`;
const forwardedProps = { workspace };

const deviations = [];
const warn = console.warn;
console.warn = (...args) => {
  deviations.push(args.map(String).join(" "));
  warn(...args);
};

function agent(text) {
  const a = new HttpAgent({ url, headers: { Authorization: `Bearer ${process.env.CAPSTAN_TOKEN}` } });
  a.messages = [{ id: randomUUID(), role: "user", content: text }];
  return a;
}

/** Runs the agent once; returns the events it received (each schema-checked again here). */
async function run(a, params = {}, onEvent = () => {}) {
  const events = [];
  await a.runAgent({ forwardedProps, ...params }, {
    onEvent({ event }) {
      EventSchemas.parse(event);
      events.push(event);
      onEvent(event, a);
    },
  });
  return events;
}

const summary = {};

// 1. A question: steps, activity, the streamed answer, citations, usage.
{
  const a = agent("How do I rotate the signing keys?");
  const events = await run(a);
  const answer = a.messages.find((m) => m.role === "assistant" && typeof m.content === "string");
  const activity = a.messages.filter((m) => m.role === "activity");
  summary.question = {
    types: events.map((e) => e.type),
    answer: answer?.content ?? null,
    activityTypes: activity.map((m) => m.activityType),
    feed: activity.find((m) => m.activityType === "capstan.activity")?.content.items.map((i) => i.message) ?? [],
    citations: events.find((e) => e.type === "CUSTOM" && e.name === "capstan.citations")?.value.citations ?? [],
    finished: events.at(-1),
  };
}

// 2. An approval: the run ends in an interrupt; answering it resumes the same Capstan run.
{
  const a = agent("run `make check`");
  const first = await run(a);
  const interrupts = a.pendingInterrupts;
  const resume = buildResumeArray(interrupts, {
    [interrupts[0].id]: { status: "resolved", payload: { decision: "approved" } },
  });
  const second = await run(a, { resume });
  const plan = a.messages.find((m) => m.role === "activity" && m.activityType === "capstan.plan");
  summary.approval = {
    firstTypes: first.map((e) => e.type),
    interrupt: first.at(-1),
    pendingAfterResume: a.pendingInterrupts.length,
    secondTypes: second.map((e) => e.type),
    plan: plan?.content ?? null,
    toolResults: a.messages.filter((m) => m.role === "tool").map((m) => m.content),
    finished: second.at(-1),
  };
}

// 3. abortRun while a long command runs: the client stops and the server cancels the run.
{
  const a = agent("run `sleep 60`");
  let capstanRunId = null;
  const events = await run(a, {}, (event, agent) => {
    if (event.type === "RUN_STARTED") capstanRunId = event.metadata.capstan.runId;
    if (event.type === "STEP_STARTED" && event.stepName.startsWith("task")) agent.abortRun();
  });
  summary.abort = { types: events.map((e) => e.type), capstanRunId };
}

summary.deviations = deviations.filter((d) => d.includes("[ag-ui]"));
process.stdout.write(JSON.stringify(summary) + "\n");
