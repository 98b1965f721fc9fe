<?php
// The PHP producer of the conformance runner (tests/test_conformance.py): one operation read as
// JSON from stdin ({"op": "add", "task": {...}} | {"op": "delete", "topic", "id", "hard"} |
// {"op": "get", "topic", "id"}), done through Delayd\Client on the Redis of argv[1] (a redis://
// URL), loaded by the autoloader argv[2] names (an application's vendor/autoload.php, Composer's);
// its answer written as JSON: {"result": ...}, {"error": "invalid", "message": "..."} (a TaskError)
// or {"error": "store", "message": "..."} (a StoreError).
// A string that is not UTF-8 travels as {"$bytes": "<base64>"}, a number JSON's values cannot carry (NaN,
// Infinity, 1e400) as {"$number": "<its JSON text>"}: PHP's float of it.
declare(strict_types=1);

require $argv[2];

function unwrap(mixed $value): mixed
{
    if (is_array($value)) {
        if (array_keys($value) === ['$bytes']) {
            return base64_decode($value['$bytes']);
        }
        if (array_keys($value) === ['$number']) {
            return match ($value['$number']) {
                'NaN' => NAN,
                'Infinity' => INF,
                '-Infinity' => -INF,
                default => (float) $value['$number'],
            };
        }
        return array_map('unwrap', $value);
    }
    return $value;
}

$url = parse_url($argv[1]);
$redis = new Redis();
$redis->connect($url['host'], $url['port']);
$client = new Delayd\Client($redis, ['prefix' => 'delayd:']);
$op = unwrap(json_decode(stream_get_contents(STDIN), true, 512, JSON_THROW_ON_ERROR));
try {
    $result = match ($op['op']) {
        'add' => $client->add($op['task']),
        'delete' => $client->delete($op['topic'], $op['id'], $op['hard']),
        'get' => $client->get($op['topic'], $op['id']),
    };
    if (is_array($result) && $result['params'] === []) {
        $result['params'] = new stdClass();  // {} as Python prints it
    }
    echo json_encode(['result' => $result], JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR), "\n";
} catch (Delayd\TaskError $e) {
    echo json_encode(['error' => 'invalid', 'message' => $e->getMessage()]), "\n";
} catch (Delayd\StoreError $e) {
    echo json_encode(['error' => 'store', 'message' => $e->getMessage()]), "\n";
}
