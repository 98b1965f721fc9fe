<?php
// The PHP client's figures for ./scripts/bench (part `php`): `add` one at a time beside the same
// phpredis connection's round trip for a trivial EVALSHA (rounds alternating, so both see the same
// machine; the ratio per round), and addMany's tasks/s, each with Redis's own time in add.lua (INFO
// commandstats; EVALSHA on Redis 6.2, FCALL of the library on Redis >= 7). Usage: php bench_php.php HOST PORT; prints one JSON object of medians.
declare(strict_types=1);

require __DIR__ . '/../clients/php/autoload.php';

const N = 4000;
const ROUNDS = 5;
const MANY = 20000;

function median(array $values): float
{
    sort($values);
    $n = count($values);
    return $n % 2 ? $values[intdiv($n, 2)] : ($values[$n / 2 - 1] + $values[$n / 2]) / 2;
}

/** Redis's own µs in script calls (EVALSHA, FCALL) since the last call (INFO commandstats), then the counters reset. */
function redisMicros(Redis $redis): float
{
    $stats = $redis->info('commandstats');
    $usec = 0.0;
    foreach (['cmdstat_evalsha', 'cmdstat_fcall'] as $name) {
        $usec += preg_match('/usec=(\d+)/', (string) ($stats[$name] ?? ''), $m) ? (float) $m[1] : 0.0;
    }
    $redis->rawCommand('CONFIG', 'RESETSTAT');
    return $usec;
}

$redis = new Redis();
$redis->connect($argv[1], (int) $argv[2]);
$client = new Delayd\Client($redis, ['prefix' => 'delayd:']);
$trivial = $redis->script('load', 'return 1');
$client->add(['topic' => 'warm', 'id' => 0, 'call' => 'delayd.examples:noop']);  // meta read, script loaded
$rt = $add = $pct = $addUs = [];
for ($round = 0; $round < ROUNDS; $round++) {
    $start = hrtime(true);
    for ($i = 0; $i < N; $i++) {
        $redis->evalSha($trivial, [], 0);
    }
    $rt[] = N / ((hrtime(true) - $start) / 1e9);
    redisMicros($redis);
    $start = hrtime(true);
    for ($i = 0; $i < N; $i++) {
        $client->add(['topic' => 'bench', 'id' => $round * N + $i, 'call' => 'delayd.examples:noop', 'delay' => 3600]);
    }
    $add[] = N / ((hrtime(true) - $start) / 1e9);
    $addUs[] = redisMicros($redis) / N;
    $pct[] = 100 * end($add) / end($rt);
}
$tasks = [];
for ($i = 0; $i < MANY; $i++) {
    $tasks[] = ['topic' => 'many', 'id' => $i, 'call' => 'delayd.examples:noop', 'delay' => 3600];
}
redisMicros($redis);
$start = hrtime(true);
$client->addMany($tasks);
$many = MANY / ((hrtime(true) - $start) / 1e9);
echo json_encode(['rt' => median($rt), 'add' => median($add), 'pct' => median($pct), 'add_us' => median($addUs),
    'many' => $many, 'many_us' => redisMicros($redis) / MANY]), "\n";
