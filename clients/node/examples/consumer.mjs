// A reliable consumer of a delayd push target: the daemon RPUSHes each due task (the JSON of
// `delayd get --json`) onto LIST. Each one is moved atomically to a processing list with
// BLMOVE, handled, then acknowledged (LREM): a consumer that dies mid-task leaves it in the
// processing list, and the next start handles it again before taking new ones (at least once).
//
//   node examples/consumer.mjs REDIS_URL LIST [--count N]
//
// handle() prints `topic:id params` per task; --count N stops after N tasks (for tests).
import Redis from 'ioredis';

const [url, list, ...rest] = process.argv.slice(2);
const count = rest[0] === '--count' ? Number(rest[1]) : Infinity;
const processing = `${list}:processing`; // one per consumer if several run: e.g. `${list}:processing:${host}`
const redis = new Redis(url);

async function handle(task) {
  console.log(`${task.key} ${JSON.stringify(task.params)}`);
}

let done = 0;
async function consume(raw) {
  await handle(JSON.parse(raw));
  await redis.lrem(processing, 1, raw); // the acknowledgement
  done += 1;
}

for (const raw of await redis.lrange(processing, 0, -1)) { // left by a consumer that stopped mid-task
  if (done < count) await consume(raw);
}
while (done < count) {
  await consume(await redis.blmove(list, processing, 'LEFT', 'RIGHT', 0)); // blocks until a task comes
}
redis.disconnect();
