<?php
// A stored task record as `delayd get --json` prints it (docs/protocol.md, section 5; Python's
// Task.from_record and Task.to_dict): the fields the table shows (Fields.php), each from the spec or its default.
declare(strict_types=1);

namespace Delayd;

final class Record
{
    private const ATTEMPT_FIELDS = ['run', 'at', 'ms', 'outcome', 'status', 'error'];

    /** @param array<string, string> $record the HGETALL of the task's key */
    public static function toArray(string $topic, string $id, array $record, int $defaultRetries): array
    {
        $spec = json_decode($record['spec'] ?? '', true);
        if (!is_array($spec)) {
            throw new StoreError("$topic:$id: corrupt record: its spec is not a JSON object");
        }
        $backoff = !isset($spec['intervals']) && !isset($spec['every']) && !isset($spec['cron']);
        $persistent = $spec['persistent'] ?? true;
        $retries = null;
        if ($backoff) {
            $retries = $persistent ? ($spec['retries'] ?? $defaultRetries) : 0;
        }
        return array_replace(Fields::SHOWN, array_intersect_key($spec, Fields::SHOWN), [
            'topic' => $topic, 'id' => $id, 'key' => "$topic:$id", 'method' => strtoupper($spec['method'] ?? 'GET'),
            'persistent' => $persistent, 'priority' => (int) ($record['priority'] ?? 2),
            'tz' => isset($spec['cron']) ? ($spec['tz'] ?? 'UTC') : null,
            'retries' => $retries, 'status' => $record['status'] ?? 'delayed',
            'created_at' => self::seconds($record['created'] ?? null), 'due_at' => self::seconds($record['due'] ?? null),
            'last_run_at' => self::seconds($record['last_run'] ?? null),
            'last_due_at' => self::seconds($record['last_due'] ?? null),
            'runs' => (int) ($record['runs'] ?? 0), 'last_error' => ($record['error'] ?? '') === '' ? null : $record['error'],
            'attempts' => self::attempts($record['attempts'] ?? ''),
            'traceparent' => is_string($spec['trace'] ?? null) ? substr($spec['trace'], 0, 55) : null,
        ]);
    }

    private static function seconds(?string $ms): ?float
    {
        return $ms === null || $ms === '' ? null : ((int) $ms) / 1000;
    }

    /** The delivery log, one JSON array per line, as objects; lines that do not parse are skipped. */
    private static function attempts(string $log): array
    {
        $out = [];
        foreach ($log === '' ? [] : explode("\n", $log) as $line) {
            $values = json_decode($line, true);
            if (is_array($values) && array_is_list($values) && count($values) === count(self::ATTEMPT_FIELDS)) {
                $entry = array_combine(self::ATTEMPT_FIELDS, $values);
                if (is_int($entry['at']) || is_float($entry['at'])) {
                    $entry['at'] = abs($entry['at']) < 2 ** 53 ? $entry['at'] / 1000 : null;
                }
                $out[] = $entry;
            }
        }
        return $out;
    }
}
