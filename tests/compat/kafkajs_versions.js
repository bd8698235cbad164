// Conditional appends (key.versioning.enable) with kafkajs, for
// tests/integration/test_key_versions.py. Reads one JSON job on stdin:
//   {"bootstrap", "topic", "idempotent": bool,
//    "sends": [[{"key", "value", "expected": N or null}, ...], ...]}
// Each send is one producer.send (one batch) with acks=-1; prints one JSON result per
// send: {"ok": [{"partition", "baseOffset"}]} or {"error": {"name", "type", "code",
// "retriable", "message"}}.
"use strict";

const { Kafka, logLevel } = require("kafkajs");

async function readJob() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString());
}

async function main() {
  const job = await readJob();
  const kafka = new Kafka({
    clientId: "chronik-versions",
    brokers: [job.bootstrap],
    logLevel: logLevel.NOTHING,
    retry: { retries: 3, initialRetryTime: 100 },
  });
  const producer = kafka.producer({ idempotent: !!job.idempotent, allowAutoTopicCreation: false });
  await producer.connect();
  const results = [];
  try {
    for (const send of job.sends) {
      const messages = send.map((m) => ({
        key: m.key,
        value: m.value,
        headers:
          m.expected === null || m.expected === undefined
            ? {}
            : { "chronik-expected-version": String(m.expected) },
      }));
      try {
        const sent = await producer.send({ topic: job.topic, acks: -1, messages });
        results.push({ ok: sent.map((s) => ({ partition: s.partition, baseOffset: s.baseOffset })) });
      } catch (e) {
        // A KafkaJSProtocolError, or the retrier's KafkaJSNumberOfRetriesExceeded around one.
        const cause = e.originalError || e;
        results.push({
          error: {
            name: e.name,
            causeName: cause.name,
            type: cause.type,
            code: cause.code,
            retriable: e.retriable,
            message: cause.message,
          },
        });
      }
    }
  } finally {
    await producer.disconnect();
  }
  process.stdout.write(JSON.stringify(results));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
