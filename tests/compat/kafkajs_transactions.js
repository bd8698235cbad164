// Drives kafkajs's transactions for tests/integration/test_transactions_kafkajs.py.
// Reads one JSON job on stdin: {"bootstrap", "topic", "input", "group", "transactionalId"}.
// Commits a transaction of four records over two partitions with the group's offset of
// input-0 (5), aborts one of two records, then reads the topic with readUncommitted false
// and true. Prints {"committed": [values], "uncommitted": [values], "offsets": [...]}.
"use strict";

const { Kafka, logLevel } = require("kafkajs");

async function readJob() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString());
}

const values = (prefix, n) =>
  Array.from({ length: n }, (_, i) => ({ value: `${prefix}${i}`, partition: i % 2 }));

// Every value one consumer reads from the start, once `expected` have come and nothing
// more for a second.
async function read(kafka, topic, readUncommitted, expected) {
  const consumer = kafka.consumer({
    groupId: `reader-${readUncommitted}-${Date.now()}`,
    readUncommitted,
    maxWaitTimeInMs: 200,
  });
  await consumer.connect();
  const got = [];
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({ autoCommit: false, eachMessage: async ({ message }) => {
      got.push(message.value.toString());
    } });
    const deadline = Date.now() + 60000;
    while (got.length < expected && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    await new Promise((r) => setTimeout(r, 1000));
    return got.sort();
  } finally {
    await consumer.disconnect();
  }
}

async function main() {
  const job = await readJob();
  const kafka = new Kafka({
    clientId: "chronik-tests",
    brokers: [job.bootstrap],
    logLevel: logLevel.WARN,
    retry: { retries: 8 },
  });
  const admin = kafka.admin();
  await admin.connect();
  const out = {};
  try {
    await admin.createTopics({
      topics: [{ topic: job.topic, numPartitions: 2 }, { topic: job.input, numPartitions: 1 }],
      waitForLeaders: true,
    });
    const producer = kafka.producer({
      transactionalId: job.transactionalId,
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await producer.connect();
    let txn = await producer.transaction();
    await txn.send({ topic: job.topic, messages: values("c", 4) });
    await txn.sendOffsets({
      consumerGroupId: job.group,
      topics: [{ topic: job.input, partitions: [{ partition: 0, offset: "5" }] }],
    });
    await txn.commit();
    txn = await producer.transaction();
    await txn.send({ topic: job.topic, messages: values("a", 2) });
    await txn.abort();
    await producer.disconnect();
    out.offsets = await admin.fetchOffsets({ groupId: job.group, topics: [job.input] });
  } finally {
    await admin.disconnect();
  }
  out.committed = await read(kafka, job.topic, false, 4);
  out.uncommitted = await read(kafka, job.topic, true, 6);
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
