<?php
// A delayd producer for PHP on phpredis: add, addMany (pipelined), delete and get, by the
// protocol in docs/protocol.md. The Lua scripts are shipped in the package (lua/, written by delayd's
// own linker: Lua.php reads them) and called as Python calls them (Scripts.php: FCALL of delayd's function
// library, or EVALSHA on Redis 6.2), so Redis runs the same code whichever producer sent it.
declare(strict_types=1);

namespace Delayd;

final class Client
{
    public const PROTOCOL = Version::PROTOCOL;
    public const LAYOUT = Version::LAYOUT;
    /** What delete() answers for a task deleted too late: a run of it had already been claimed. */
    public const CLAIMED = 'claimed';
    private const MAX_BUCKETS = 1024;
    private const ADD_BATCH = 200;  // tasks per add.lua call, as the Python client sends them

    private string $prefix;
    private ?int $buckets = null;
    private array $options;
    private Scripts $scripts;

    /**
     * @param \Redis $redis a connected phpredis client (without OPT_PREFIX: the keys are delayd's own)
     * @param array{prefix?: string, buckets?: int, params_limit?: int, retention?: float, retries?: int}
     *              $options prefix (default 'delayd:'); buckets, written only to a store
     *              nobody used yet (default 4); params_limit (bytes, default 65536); retention (seconds a
     *              soft-deleted task stays readable, default 7 days); retries (what get() shows for a task
     *              that gives none, default 20)
     */
    public function __construct(private \Redis $redis, array $options = [])
    {
        $this->options = $options + ['prefix' => 'delayd:', 'buckets' => 4, 'params_limit' => 65536,
            'retention' => 604800.0, 'retries' => 20];
        $this->prefix = (string) $this->options['prefix'];
        if ($this->prefix === '' || strpbrk($this->prefix, '{}') !== false) {
            throw new StoreError("prefix must be a non-empty string without '{' or '}'");
        }
        $this->scripts = new Scripts($redis);
    }

    /**
     * Add (or replace) a task: Client.add's arguments as an array, with topic and id ('intervalTime'
     * is taken as 'intervals', the seed's name). 'nx' => true only adds it if it does not exist:
     * false, and nothing changed, if it does. Throws TaskError for an invalid task (nothing written).
     */
    public function add(array $task): bool
    {
        $nx = $task['nx'] ?? false;
        if (!is_bool($nx)) {
            throw new TaskError('nx must be true or false');
        }
        unset($task['nx']);
        $built = new Task($task, (int) $this->options['params_limit']);
        self::refuseNx([$built], $nx);
        [$keys, $args] = $this->addCall([$built], $nx);
        return $this->scripts->call('add', $keys, $args) === 1;
    }

    /**
     * Add many tasks (each an add() array), every one validated before anything is written,
     * in pipelined calls of up to 200 tasks of one bucket. Returns how many were written. When Redis
     * refuses a call (none of its tasks written), throws its refusal saying how many of the others were.
     */
    public function addMany(array $tasks, bool $nx = false): int
    {
        $byBucket = [];
        foreach (array_values($tasks) as $n => $task) {
            if (!is_array($task)) {
                throw new TaskError("item $n: expected an array of add() arguments");
            }
            try {
                $built = new Task($task, (int) $this->options['params_limit']);
            } catch (TaskError $e) {
                throw new TaskError("item $n: " . $e->getMessage());
            }
            $byBucket[$this->bucketOf($built->member)][] = $built;
        }
        self::refuseNx(array_merge([], ...array_values($byBucket)), $nx);
        $calls = [];
        foreach ($byBucket as $entries) {
            foreach (array_chunk($entries, self::ADD_BATCH) as $chunk) {
                $calls[] = $this->addCall($chunk, $nx);
            }
        }
        $written = 0;
        $refused = null;
        foreach ($this->scripts->pipelined('add', $calls) as $reply) {
            if ($reply instanceof \Exception) {
                $refused ??= $reply;
            } else {
                $written += $reply;
            }
        }
        if ($refused !== null) {  // the other calls stand: say how much of the batch is in Redis
            $total = count($tasks);
            throw new ($refused::class)($refused->getMessage() . " ($written of $total task(s) were written)");
        }
        return $written;
    }

    /**
     * Mark a task deleted (it never runs again); $hard removes every trace. True: deleted in time, no run of
     * it starts after this returned; false: there was no such task; Client::CLAIMED ('claimed'): deleted, but
     * too late for a run already claimed, whose handler may be starting or running. A non-empty string is
     * truthy in PHP: compare with `=== true` to know it was cancelled in time.
     */
    public function delete(string $topic, string|int $id, bool $hard = false): bool|string
    {
        $member = "$topic:$id";
        $tag = $this->tag($member);
        $parked = substr($member, 0, strrpos($member, ':'));  // the topic as the scripts read it: up to the last ':'
        $keys = ["{$tag}t:$member", "{$tag}delayed", "{$tag}leases", "{$tag}done:ok", "{$tag}done:failed",
            "{$tag}done:deleted", "{$tag}quarantine", "{$tag}counts", "{$tag}recurring",
            "{$tag}paused:$parked", "{$tag}corrupt"];
        $answer = $this->scripts->call('delete', $keys, [$member, $hard ? 1 : 0, (int) ($this->options['retention'] * 1000)]);
        return $answer === 2 ? self::CLAIMED : $answer === 1;
    }

    /** The task as `delayd get --json` prints it (docs/protocol.md, section 5), or null. */
    public function get(string $topic, string|int $id): ?array
    {
        $member = "$topic:$id";
        $record = $this->redis->hGetAll($this->tag($member) . "t:$member");
        if (!is_array($record)) {
            throw new StoreError("$member: corrupt record: its key is not a hash");
        }
        return $record ? Record::toArray($topic, (string) $id, $record, (int) $this->options['retries']) : null;
    }

    /** The bucket count of the store, read (and checked) once. */
    public function buckets(): int
    {
        if ($this->buckets !== null) {
            return $this->buckets;
        }
        $key = $this->prefix . 'meta';
        $fields = ['buckets', 'layout', 'protocol'];
        $meta = $this->redis->hMGet($key, $fields);
        if (!is_array($meta)) {
            throw new StoreError("$key in Redis is not a hash; it should hold the bucket count");
        }
        self::refuseOtherVersions($key, $meta, true);  // before writing anything into another version's store
        if (in_array(false, $meta, true)) {  // first use: the defaults, as the Python client writes them
            $this->redis->hSetNx($key, 'buckets', (string) $this->options['buckets']);
            $this->redis->hSetNx($key, 'layout', (string) self::LAYOUT);
            $this->redis->hSetNx($key, 'protocol', (string) self::PROTOCOL);
            $meta = $this->redis->hMGet($key, $fields);
            self::refuseOtherVersions($key, $meta, false);
        }
        $count = ctype_digit((string) $meta['buckets']) && strlen((string) $meta['buckets']) <= 5 ? (int) $meta['buckets'] : 0;
        if ($count < 1 || $count > self::MAX_BUCKETS) {
            throw new StoreError("$key in Redis holds buckets = '" . substr((string) $meta['buckets'], 0, 40)
                . "', not a bucket count (1-" . self::MAX_BUCKETS . ')');
        }
        return $this->buckets = $count;
    }

    /** StoreError when the meta hash names another protocol or layout (a missing field too, unless `$absentOk`). */
    private static function refuseOtherVersions(string $key, array $meta, bool $absentOk): void
    {
        foreach (['protocol' => self::PROTOCOL, 'layout' => self::LAYOUT] as $field => $ours) {
            if ((string) $meta[$field] !== (string) $ours && !($absentOk && $meta[$field] === false)) {
                throw new StoreError("$key in Redis says $field = '" . substr((string) $meta[$field], 0, 40)
                    . "'; this client speaks $field $ours (a store of another version of delayd)");
            }
        }
    }

    private function bucketOf(string $member): int
    {
        return crc32($member) % $this->buckets();
    }

    private function tag(string $member): string
    {
        return $this->prefix . '{' . $this->bucketOf($member) . '}:';
    }

    /** @param Task[] $built */
    private static function refuseNx(array $built, bool $nx): void
    {
        foreach ($built as $task) {
            if ($nx && $task->mode === 'debounce') {
                throw new TaskError('give debounce or nx, not both');  // a debounce replaces the task it finds
            }
        }
    }

    /**
     * KEYS and ARGV of one add.lua call for tasks of one bucket (docs/protocol.md, section 3), flagged 'c':
     * this client checked every task (section 7), so the script does not check them again; its reply is
     * how many it wrote.
     */
    private function addCall(array $tasks, bool $nx): array
    {
        $bucket = $this->bucketOf($tasks[0]->member);
        $tag = $this->prefix . '{' . $bucket . '}:';
        $keys = ["{$tag}delayed"];  // the short form: delayed, then each task's record (the script names the rest)
        $args = [$nx ? '1c' : '0c', $this->prefix . 'wake:' . $bucket];
        foreach ($tasks as $task) {
            $keys[] = "{$tag}t:{$task->member}";
            array_push($args, $task->spec, $task->priority, $task->mode, $task->value);
        }
        return [$keys, $args];
    }
}
