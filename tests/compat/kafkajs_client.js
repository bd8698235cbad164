// Drives kafkajs for tests/integration/test_client_kafkajs.py.
// Reads one JSON job on stdin, prints one JSON result on stdout:
//   {"bootstrap", "topic", "partitions", "codec": "none|gzip|snappy|lz4|zstd", "acks": -1|0|1,
//    "idempotent": bool, "records": [{"key", "value", "headers": [[k, v]], "timestamp"}],
//    "queries": [timestamp...], "consume": count, "group": id}
// Keys, values and header values travel as base64, timestamps as decimal strings.
"use strict";

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require("kafkajs");
const SnappyCodec = require("kafkajs-snappy");
const lz4 = require("lz4js");
const { ZstdCodec } = require("zstd-codec");

// kafkajs ships gzip only. Snappy comes from kafkajs-snappy; lz4 (LZ4 frames) and zstd are
// wired here from pure-JavaScript libraries, where kafkajs's own packages need native add-ons.
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;
CompressionCodecs[CompressionTypes.LZ4] = () => ({
  compress: async (encoder) => Buffer.from(lz4.compress(encoder.buffer)),
  decompress: async (buffer) => Buffer.from(lz4.decompress(buffer)),
});
// The streaming API, because librdkafka's frames do not state their content size.
const zstd = new Promise((resolve) => ZstdCodec.run((z) => resolve(new z.Streaming())));
CompressionCodecs[CompressionTypes.ZSTD] = () => ({
  compress: async (encoder) => Buffer.from((await zstd).compress(encoder.buffer, 3)),
  decompress: async (buffer) => Buffer.from((await zstd).decompress(buffer)),
});

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
};

const b64 = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString("base64"));
const unb64 = (s) => (s === null ? null : Buffer.from(s, "base64"));

async function readJob() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString());
}

async function produce(kafka, job) {
  const producer = kafka.producer({ idempotent: !!job.idempotent, allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const messages = job.records.map((r) => ({
      key: unb64(r.key),
      value: unb64(r.value),
      timestamp: r.timestamp,
      headers: r.headers.reduce((acc, [k, v]) => {
        // kafkajs keeps repeated header names as an array of values.
        const value = unb64(v);
        if (k in acc) acc[k] = [].concat(acc[k], value);
        else acc[k] = value;
        return acc;
      }, {}),
    }));
    const results = [];
    // Several sends, so there are several batches per partition.
    for (let i = 0; i < messages.length; i += 25) {
      const sent = await producer.send({
        topic: job.topic,
        acks: job.acks,
        compression: CODECS[job.codec],
        messages: messages.slice(i, i + 25),
      });
      results.push(...sent.map((s) => ({ partition: s.partition, baseOffset: s.baseOffset })));
    }
    return results;
  } finally {
    await producer.disconnect();
  }
}

async function consume(kafka, job) {
  const consumer = kafka.consumer({ groupId: job.group, sessionTimeout: 30000, maxWaitTimeInMs: 200 });
  await consumer.connect();
  const got = [];
  try {
    await consumer.subscribe({ topic: job.topic, fromBeginning: true });
    let done;
    const finished = new Promise((resolve) => (done = resolve));
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        const headers = [];
        for (const [k, v] of Object.entries(message.headers || {})) {
          for (const one of [].concat(v)) headers.push([k, b64(one)]);
        }
        got.push({
          partition,
          offset: message.offset,
          key: b64(message.key),
          value: b64(message.value),
          headers,
          timestamp: message.timestamp,
        });
        if (got.length >= job.consume) done();
      },
    });
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`consumed ${got.length} of ${job.consume}`)), 90000);
    });
    try {
      await Promise.race([finished, timeout]);
    } finally {
      clearTimeout(timer);
    }
    return got;
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
    retry: { retries: 5 },
  });
  const out = {};
  const admin = kafka.admin();
  await admin.connect();
  try {
    if (job.partitions) {
      out.created = await admin.createTopics({
        topics: [{ topic: job.topic, numPartitions: job.partitions, replicationFactor: 1 }],
        waitForLeaders: true,
      });
    }
    if (job.records) out.produced = await produce(kafka, job);
    out.latest = await admin.fetchTopicOffsets(job.topic);
    out.byTime = [];
    for (const ts of job.queries || []) {
      out.byTime.push(await admin.fetchTopicOffsetsByTimestamp(job.topic, ts));
    }
  } finally {
    await admin.disconnect();
  }
  if (job.consume) out.consumed = await consume(kafka, job);
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stderr.write(`${err.stack || err}\n`);
  process.exit(1);
});
