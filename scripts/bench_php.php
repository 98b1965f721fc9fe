<?php
// The PHP client's figures for ./scripts/bench (part `php`): `add` one at a time beside the same
// phpredis connection's round trip for a trivial EVALSHA (rounds alternating, so both see the same
// machine; the ratio per round), and addMany's tasks/s. Usage: php bench_php.php HOST PORT;
// prints one JSON object of medians.
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

$redis = new Redis();
$redis->connect($argv[1], (int) $argv[2]);
$client = new Delayd\Client($redis, ['prefix' => 'delayd:']);
$trivial = $redis->script('load', 'return 1');
$client->add(['topic' => 'warm', 'id' => 0, 'call' => 'delayd.examples:noop']);  // meta read, script loaded
$rt = $add = $pct = [];
for ($round = 0; $round < ROUNDS; $round++) {
    $start = hrtime(true);
    for ($i = 0; $i < N; $i++) {
        $redis->evalSha($trivial, [], 0);
    }
    $rt[] = N / ((hrtime(true) - $start) / 1e9);
    $start = hrtime(true);
    for ($i = 0; $i < N; $i++) {
        $client->add(['topic' => 'bench', 'id' => $round * N + $i, 'call' => 'delayd.examples:noop', 'delay' => 3600]);
    }
    $add[] = N / ((hrtime(true) - $start) / 1e9);
    $pct[] = 100 * end($add) / end($rt);
}
$tasks = [];
for ($i = 0; $i < MANY; $i++) {
    $tasks[] = ['topic' => 'many', 'id' => $i, 'call' => 'delayd.examples:noop', 'delay' => 3600];
}
$start = hrtime(true);
$client->addMany($tasks);
$many = MANY / ((hrtime(true) - $start) / 1e9);
echo json_encode(['rt' => median($rt), 'add' => median($add), 'pct' => median($pct), 'many' => $many]), "\n";
