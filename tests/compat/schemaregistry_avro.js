// Confluent's JavaScript Schema Registry client (@confluentinc/schemaregistry) against
// chronik's registry, with kafkajs carrying the records:
//   node schemaregistry_avro.js REGISTRY_URL BOOTSTRAP TOPIC COUNT
// registers an Avro schema, produces COUNT records with its AvroSerializer, reads the
// topic back (every record, the ones other clients wrote included) with its
// AvroDeserializer, and prints {"id", "versions", "got"} as one JSON line.
const { SchemaRegistryClient, SerdeType, AvroSerializer, AvroDeserializer } = require('@confluentinc/schemaregistry');
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const [url, bootstrap, topic, countText] = process.argv.slice(2);
  const count = parseInt(countText, 10);
  const registry = new SchemaRegistryClient({ baseURLs: [url] });
  const schema = {
    type: 'record', name: 'Payment', namespace: 'bank',
    fields: [{ name: 'account', type: 'string' }, { name: 'cents', type: 'long' }],
  };
  const id = await registry.register(`${topic}-value`, { schemaType: 'AVRO', schema: JSON.stringify(schema) });
  const serializer = new AvroSerializer(registry, SerdeType.VALUE, { useLatestVersion: true });
  const kafka = new Kafka({ brokers: [bootstrap], logLevel: logLevel.NOTHING });
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < count; i++) {
    messages.push({ value: await serializer.serialize(topic, { account: `js-${i}`, cents: i * 100 }) });
  }
  await producer.send({ topic, messages });
  await producer.disconnect();

  const deserializer = new AvroDeserializer(registry, SerdeType.VALUE, {});
  const admin = kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  const total = ends.reduce((sum, p) => sum + Number(p.high), 0);
  const consumer = kafka.consumer({ groupId: `${topic}-js` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${got.length} of ${total} records`)), 30000);
    consumer.run({
      eachMessage: async ({ message }) => {
        const value = await deserializer.deserialize(topic, message.value);
        got.push({ account: value.account, cents: Number(value.cents) });
        if (got.length >= total) { clearTimeout(timer); resolve(); }
      },
    });
  });
  await consumer.disconnect();
  const versions = await registry.getAllVersions(`${topic}-value`);
  console.log(JSON.stringify({ id, versions, got }));
}

main().catch((e) => { console.error((e && e.stack) || e); process.exit(1); });
