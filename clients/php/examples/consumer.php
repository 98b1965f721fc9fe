<?php
// A reliable consumer of a delayd push target: the daemon RPUSHes each due task (the JSON of
// `delayd get --json`) onto LIST. Each one is moved atomically to a processing list with
// BLMOVE, handled, then acknowledged (LREM): a consumer that dies mid-task leaves it in the
// processing list, and the next start handles it again before taking new ones (at least once).
//
//   php examples/consumer.php REDIS_URL LIST [--count N]
//
// REDIS_URL: redis://[[user]:password@]host[:port][/db], or unix:///path/to/redis.sock[?db=N] (the
// embedded Redis of `./scripts/run` is one: `delayd status --json` shows it as "redis").
//
// handle() prints `topic:id params` per task; --count N stops after N tasks (for tests).
// (phpredis 5 has no blmove() method: rawCommand sends it as it is. Redis >= 6.2.)

[$url, $list] = [$argv[1], $argv[2]];
$count = ($argv[3] ?? '') === '--count' ? (int) $argv[4] : PHP_INT_MAX;
$processing = "$list:processing"; // one per consumer if several run: e.g. "$list:processing:" . gethostname()

$redis = new Redis();
if (str_starts_with($url, 'unix://')) { // (parse_url() refuses a URL with no host)
    [$socket, $query] = array_pad(explode('?', substr($url, strlen('unix://')), 2), 2, '');
    parse_str($query, $options);
    $redis->connect($socket); // a socket, by its path
    $db = (int) ($options['db'] ?? 0);
} else {
    $where = parse_url($url);
    $redis->connect($where['host'], $where['port'] ?? 6379);
    if (isset($where['pass'])) {
        $redis->auth(($where['user'] ?? '') !== '' ? [urldecode($where['user']), urldecode($where['pass'])]
            : urldecode($where['pass']));
    }
    $db = (int) ltrim($where['path'] ?? '', '/');
}
$redis->setOption(Redis::OPT_READ_TIMEOUT, -1); // BLMOVE with timeout 0 blocks until a task comes
if ($db) {
    $redis->select($db);
}

function handle(object $task): void
{
    echo $task->key, ' ', json_encode($task->params, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE), "\n";
}

$done = 0;
$consume = function (string $raw) use ($redis, $processing, &$done): void {
    handle(json_decode($raw, false, 512, JSON_THROW_ON_ERROR)); // objects: {} stays {}
    $redis->lRem($processing, $raw, 1); // the acknowledgement
    $done++;
};

foreach ($redis->lRange($processing, 0, -1) as $raw) { // left by a consumer that stopped mid-task
    if ($done < $count) {
        $consume($raw);
    }
}
while ($done < $count) {
    $consume($redis->rawCommand('BLMOVE', $list, $processing, 'LEFT', 'RIGHT', 0));
}
$redis->close();
