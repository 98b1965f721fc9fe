<?php
// Script calls on one phpredis connection, spelled as delayd.store.dialect spells them for Python: FCALL of
// the script's function in delayd's library where the server has functions (Redis >= 7.0, Valkey), EVALSHA of
// its linked source elsewhere (Redis 6.2); chosen at the first call. A call the server lacks the script of
// (NOSCRIPT: a restart, SCRIPT FLUSH; `Function not found`: FUNCTION FLUSH, a fresh server) is sent again once,
// after its load (SCRIPT LOAD; FUNCTION LOAD REPLACE of the whole library).
declare(strict_types=1);

namespace Delayd;

final class Scripts
{
    private ?bool $functions = null;

    public function __construct(private \Redis $redis)
    {
    }

    /** One call of script `$name` (add, delete): its reply. Throws Redis's refusal (TaskError, StoreError). */
    public function call(string $name, array $keys, array $args): mixed
    {
        $this->redis->clearLastError();
        $reply = $this->send($this->redis, $name, $keys, $args);
        if ($reply === false && $this->missing((string) $this->redis->getLastError())) {
            $this->redis->clearLastError();
            $this->load($name);
            $reply = $this->send($this->redis, $name, $keys, $args);
        }
        $error = $this->redis->getLastError();
        if ($reply === false && $error !== null) {
            throw self::refusal($error);
        }
        return $reply;
    }

    /**
     * Many calls of script `$name`, each [keys, args], in one pipeline: their replies, with the exception
     * (TaskError, StoreError) in place of a call Redis refused. Under EVALSHA the script is loaded first if
     * the server lacks it; a call refused in the pipeline is said again alone (call(): loaded if missing).
     */
    public function pipelined(string $name, array $calls): array
    {
        if (!$calls) {
            return [];
        }
        if (!$this->functions()) {
            [$source, $sha] = Lua::script($name);
            if (!($this->redis->script('exists', $sha)[0] ?? false)) {
                $this->redis->script('load', $source);
            }
        }
        $pipe = $this->redis->multi(\Redis::PIPELINE);
        foreach ($calls as [$keys, $args]) {
            $this->send($pipe, $name, $keys, $args);
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

    /** Whether this connection's server gets FCALL: INFO names a version with functions, and an FCALL_RO of a
     * function no library defines answers `Function not found` (a Redis-compatible server or proxy without
     * functions, or an ACL refusing FCALL, answers otherwise). Asked once. */
    private function functions(): bool
    {
        if ($this->functions === null) {
            $library = Lua::library();
            $info = $this->redis->info('server');  // (false when an ACL refuses it: EVALSHA works on every server)
            $version = is_array($info) ? (string) ($info['redis_version'] ?? '') : '';
            [$major, $minor] = array_map('intval', explode('.', $version) + [1 => 0]);
            $this->functions = false;
            if ($major > $library['since'][0] || ($major === $library['since'][0] && $minor >= $library['since'][1])) {
                $this->redis->clearLastError();
                $probe = $this->redis->rawCommand('FCALL_RO', $library['probe'], 0);
                $this->functions = $probe === false && self::functionMissing((string) $this->redis->getLastError());
            }
            $this->redis->clearLastError();
        }
        return $this->functions;
    }

    /** One call sent on `$to` (the connection, or its pipeline): its reply (false for an error). */
    private function send(\Redis $to, string $name, array $keys, array $args): mixed
    {
        if ($this->functions()) {
            return $to->rawCommand('FCALL', Lua::library()['functions'][$name], count($keys), ...$keys, ...$args);
        }
        return $to->evalSha(Lua::script($name)[1], array_merge($keys, $args), count($keys));
    }

    private function missing(string $error): bool
    {
        return $this->functions() ? self::functionMissing($error) : str_starts_with($error, 'NOSCRIPT');
    }

    private static function functionMissing(string $error): bool
    {
        return (bool) preg_match('/^(?:ERR )?Function not found/', $error);
    }

    private function load(string $name): void
    {
        if ($this->functions()) {
            $this->redis->rawCommand('FUNCTION', 'LOAD', 'REPLACE', Lua::library()['code']);
        } else {
            $this->redis->script('load', Lua::script($name)[0]);
        }
    }

    private static function refusal(string $error): \Exception
    {
        if (preg_match('/^(?:ERR )?delayd:bad-task (.*)$/', $error, $m)) {
            return new TaskError($m[1]);
        }
        return new StoreError("Redis refused the call: $error");
    }
}
