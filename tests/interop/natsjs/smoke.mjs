// nats.js smoke test: create a stream, publish with acks, read every message back, as a nats.js user would.
//
// Usage: node smoke.mjs URL[,URL...] [COUNT] [REPLICAS]
// Prints one JSON object on stdout: {"ok": true, ...figures} on success; on failure {"ok": false, "step",
// "error", "code"} and exit status 1. Run by tests/interop/test_natsjs.py against jsraft; it runs as well
// against a real nats-server (-js), which is how the expectations below were checked.
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, JetStreamApiError } from "@nats-io/jetstream";
import { headers } from "@nats-io/transport-node";

const [servers, countArg = "20", replicasArg = "1"] = process.argv.slice(2);
const count = Number(countArg);
const replicas = Number(replicasArg);
const stream = "NATSJS";
const result = { ok: false, step: "connect" };
const decode = (data) => new TextDecoder().decode(data);

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

async function run(nc) {
  result.step = "jetstreamManager";  // does an account info request first ($JS.API.INFO)
  const jsm = await jetstreamManager(nc, { timeout: 10_000 });
  const account = await jsm.getAccountInfo();
  result.account_streams_before = account.streams;

  result.step = "streams.add";
  const created = await jsm.streams.add({
    name: stream, subjects: [`${stream}.>`], num_replicas: replicas, allow_direct: true,
  });
  check(created.config.name === stream && created.state.messages === 0, "new stream is empty");
  result.created = { name: created.config.name, num_replicas: created.config.num_replicas,
                     storage: created.config.storage };

  result.step = "publish";
  const js = jetstream(nc, { timeout: 10_000 });
  const seqs = [];
  for (let i = 0; i < count; i++) {
    const h = headers();
    h.set("X-Index", String(i));
    const ack = await js.publish(`${stream}.${i % 3}`, `message ${i}`, { msgID: `id-${i}`, headers: h });
    check(ack.stream === stream && !ack.duplicate, `ack ${i}`);
    seqs.push(ack.seq);
  }
  check(seqs.every((seq, i) => seq === i + 1), "acks carry sequences 1..N");
  const again = await js.publish(`${stream}.0`, "message 0", { msgID: "id-0" });
  result.duplicate = { duplicate: again.duplicate, seq: again.seq };
  check(again.duplicate && again.seq === 1, "a repeated Nats-Msg-Id is a duplicate of seq 1");

  result.step = "publish expect";
  try {
    await js.publish(`${stream}.0`, "late", { expect: { lastSequence: 1 } });
    throw new Error("a publish with a wrong expected last sequence was accepted");
  } catch (err) {
    check(err instanceof JetStreamApiError, `expected-last-seq error type: ${err}`);
    result.wrong_last_seq_code = err.code;
  }

  result.step = "streams.info";
  const info = await jsm.streams.info(stream);
  result.state = { messages: info.state.messages, first_seq: info.state.first_seq, last_seq: info.state.last_seq };
  check(info.state.messages === count && info.state.last_seq === count, "info counts every message");

  result.step = "streams.names";
  const names = [];
  for await (const name of jsm.streams.names()) names.push(name);
  result.names = names;

  result.step = "streams.getMessage";
  const read = [];
  for (let seq = 1; seq <= count; seq++) {
    const m = await jsm.streams.getMessage(stream, { seq });
    check(m !== null && m.seq === seq, `message ${seq} found`);
    check(m.subject === `${stream}.${(seq - 1) % 3}`, `subject of ${seq}`);
    check(m.header.get("X-Index") === String(seq - 1), `header of ${seq}`);
    check(m.time instanceof Date && !Number.isNaN(m.time.getTime()), `time of ${seq}`);
    read.push(decode(m.data));
  }
  check(read.every((text, i) => text === `message ${i}`), "payloads read back in order");
  result.read = read.length;
  const last = await jsm.streams.getMessage(stream, { last_by_subj: `${stream}.0` });
  result.last_by_subj = last.seq;
  result.missing = await jsm.streams.getMessage(stream, { seq: count + 100 });

  result.step = "direct.getMessage";
  const direct = await jsm.direct.getMessage(stream, { seq: 2 });
  check(direct !== null && direct.seq === 2 && decode(direct.data) === "message 1", "direct get by seq");
  const directLast = await jsm.direct.getMessage(stream, { last_by_subj: `${stream}.1` });
  result.direct = { seq: direct.seq, subject: direct.subject, last_by_subj: directLast.seq };

  result.step = "streams.deleteMessage";
  check(await jsm.streams.deleteMessage(stream, 1), "delete message 1");
  result.step = "streams.purge";
  const purged = await jsm.streams.purge(stream, { filter: `${stream}.2` });
  result.purged = purged.purged;
  const after = await jsm.streams.info(stream);
  result.after = { messages: after.state.messages, first_seq: after.state.first_seq };

  result.step = "streams.delete";
  check(await jsm.streams.delete(stream), "stream deleted");
  result.step = "done";
  result.ok = true;
}

let nc;
try {
  nc = await connect({ servers: servers.split(","), timeout: 10_000, reconnect: false });
  result.server = nc.info?.server_name;
  await run(nc);
} catch (err) {
  result.error = String(err?.message ?? err);
  result.code = err?.code;
} finally {
  if (nc) await nc.close();
}
process.stdout.write(JSON.stringify(result) + "\n");
process.exit(result.ok ? 0 : 1);
