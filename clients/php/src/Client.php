<?php
// A delayd producer for PHP on phpredis: add, addMany (pipelined), delete and get, by the
// protocol in docs/protocol.md. The Lua scripts are shipped in the package (lua/, linked by delayd's
// own linker: Lua.php reads them), so Redis runs the same source whichever producer sent it.
declare(strict_types=1);

namespace Delayd;

final class Client
{
    public const PROTOCOL = Version::PROTOCOL;
    public const LAYOUT = Version::LAYOUT;
    private const MAX_BUCKETS = 1024;
    private const ADD_BATCH = 200;  // tasks per add.lua call, as the Python client sends them

    private string $prefix;
    private ?int $buckets = null;
    private array $options;

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
        return $this->call('add', $keys, $args) === 1;
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
        foreach ($this->pipelined('add', $calls) as $reply) {
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

    /** Mark a task deleted (it never runs again); $hard removes every trace. False if there was none. */
    public function delete(string $topic, string|int $id, bool $hard = false): bool
    {
        $member = "$topic:$id";
        $tag = $this->tag($member);
        $parked = substr($member, 0, strrpos($member, ':'));  // the topic as the scripts read it: up to the last ':'
        $keys = ["{$tag}t:$member", "{$tag}delayed", "{$tag}leases", "{$tag}done:ok", "{$tag}done:failed",
            "{$tag}done:deleted", "{$tag}quarantine", "{$tag}counts", "{$tag}paused", "{$tag}recurring",
            "{$tag}paused:$parked", "{$tag}corrupt"];
        return $this->call('delete', $keys, [$member, $hard ? 1 : 0, (int) ($this->options['retention'] * 1000)]) === 1;
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
        $keys = ["{$tag}delayed", "{$tag}counts", "{$tag}recurring", "{$tag}leases", "{$tag}done:ok",
            "{$tag}done:failed", "{$tag}done:deleted", "{$tag}quarantine", "{$tag}paused", "{$tag}corrupt"];
        $args = [$nx ? '1c' : '0c', $this->prefix . 'wake:' . $bucket];
        foreach ($tasks as $task) {
            $keys[] = "{$tag}t:{$task->member}";
            $keys[] = "{$tag}paused:{$task->topic}";
            array_push($args, $task->spec, $task->priority, $task->mode, $task->value);
        }
        return [$keys, $args];
    }

    /** One EVALSHA; after NOSCRIPT, SCRIPT LOAD and the call again. */
    private function call(string $name, array $keys, array $args): mixed
    {
        [$source, $sha] = Lua::script($name);
        $this->redis->clearLastError();
        $reply = $this->redis->evalSha($sha, array_merge($keys, $args), count($keys));
        if ($reply === false && str_starts_with((string) $this->redis->getLastError(), 'NOSCRIPT')) {
            $this->redis->clearLastError();
            $this->redis->script('load', $source);
            $reply = $this->redis->evalSha($sha, array_merge($keys, $args), count($keys));
        }
        $error = $this->redis->getLastError();
        if ($reply === false && $error !== null) {
            throw self::refusal($error);
        }
        return $reply;
    }

    /** Many calls of one script in one pipeline (the script loaded first, once per process and server): their
     * replies, with the exception (TaskError, StoreError) in place of a call Redis refused. */
    private function pipelined(string $name, array $calls): array
    {
        [$source, $sha] = Lua::script($name);
        if (!$calls) {
            return [];
        }
        if (!($this->redis->script('exists', $sha)[0] ?? false)) {
            $this->redis->script('load', $source);
        }
        $pipe = $this->redis->multi(\Redis::PIPELINE);
        foreach ($calls as [$keys, $args]) {
            $pipe->evalSha($sha, array_merge($keys, $args), count($keys));
        }
        $replies = $pipe->exec();
        foreach ($replies as $i => $reply) {
            if (!is_int($reply)) {  // an error reply (false): said again by the same call, alone
                try {
                    $replies[$i] = $this->call($name, ...$calls[$i]);
                } catch (TaskError | StoreError $e) {
                    $replies[$i] = $e;
                }
            }
        }
        return $replies;
    }

    private static function refusal(string $error): \Exception
    {
        if (preg_match('/^(?:ERR )?delayd:bad-task (.*)$/', $error, $m)) {
            return new TaskError($m[1]);
        }
        return new StoreError("Redis refused the call: $error");
    }
}
