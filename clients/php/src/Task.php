<?php
// One task's arguments checked as Python's Client.add checks them (delayd/model/task.py and
// delayd/client/base.py), and turned into add.lua's spec, priority, mode and value
// (docs/protocol.md). The script checks again whatever the daemon would misread; these checks
// are for messages a user can act on. Cron expressions are checked field by field here; their
// first due time is the daemon's to compute (mode next*).
declare(strict_types=1);

namespace Delayd;

final class Task
{
    public const FIELDS = ['topic', 'id', 'call', 'url', 'push', 'method', 'body', 'params', 'intervals',
        'intervalTime', 'persistent', 'priority', 'callback', 'timeout', 'every', 'cron', 'tz', 'retries',
        'signing_key', 'traceparent', 'tracestate', 'delay', 'at', 'debounce', 'max_wait'];
    private const KEY_NAME = '/^[A-Za-z0-9_.:-]{1,128}$/D';  // a signing key's name (delayd.model.task.KEY_NAME_RE)
    // W3C trace context (delayd.model.task.TRACEPARENT_RE): a traceparent of version 00, a tracestate kept with it
    private const TRACEPARENT = '/^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/D';
    private const TRACESTATE = '/^[!-~](?:[ -~]{0,510}[!-~])?$/D';
    private const MAX_NAME = 512;
    private const TEN_YEARS = 10 * 365 * 86400;
    private const MAX_RETRIES = 10000;
    private const TARGET = '/^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$/D';
    private const JSON = JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR;
    /** Params nest at most this deep, the params object being level 1 (delayd.model.checks, add.lua). */
    private const MAX_PARAMS_DEPTH = 64;
    // Each cron field's range and the names it takes (as cronsim reads them).
    private const CRON = [['minute', 0, 59], ['hour', 0, 23], ['day-of-month', 1, 31], ['month', 1, 12],
        ['day-of-week', 0, 7]];
    private const NAMES = [3 => ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'],
        4 => ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT']];

    public string $member;
    public string $topic;
    public string $spec;
    public int $priority;
    public string $mode;
    public int|string $value;  // ms, or a debounce's 'WAIT:MOST'

    /** @param array<string, mixed> $task add()'s array: Client.add's keyword arguments, with topic and id */
    public function __construct(array $task, int $paramsLimit = 65536)
    {
        $unknown = array_diff(array_keys($task), self::FIELDS);
        if ($unknown) {
            sort($unknown);
            throw new TaskError('unknown task field(s): ' . implode(', ', $unknown));
        }
        if (array_key_exists('intervalTime', $task)) {  // the seed's name
            if (array_key_exists('intervals', $task)) {
                throw new TaskError('give intervals or intervalTime (its synonym), not both');
            }
            $task['intervals'] = $task['intervalTime'];
        }
        $this->topic = self::name('topic', $task['topic'] ?? null);
        $id = self::name('id', $task['id'] ?? null);
        if (str_contains($id, ':')) {
            throw new TaskError("id must not contain ':' (the key is topic:id)");
        }
        $this->member = $this->topic . ':' . $id;
        $targets = array_filter(['call', 'url', 'push'], static fn ($k) => ($task[$k] ?? null) !== null && $task[$k] !== '');
        if (count($targets) !== 1) {
            throw new TaskError('give exactly one of call, url or push');
        }
        $spec = [];
        foreach (['call', 'callback'] as $k) {
            if (isset($task[$k]) && (!is_string($task[$k]) || !preg_match(self::TARGET, $task[$k]))) {
                throw new TaskError("$k must look like package.module:function, got " . self::shown($task[$k]));
            }
        }
        $url = $task['url'] ?? null;
        if ($url !== null) {
            self::checkUrl($url);
        }
        if (isset($task['push'])) {
            self::name('push list', $task['push']);
        }
        $signingKey = $task['signing_key'] ?? null;
        if ($signingKey !== null) {
            if (!is_string($signingKey) || !preg_match(self::KEY_NAME, $signingKey)) {
                throw new TaskError("signing_key must be 1-128 letters, digits, '_', '.', ':' or '-', got "
                    . self::shown($signingKey));
            }
            if ($url === null) {
                throw new TaskError('signing_key is for a url task: only URL requests are signed');
            }
        }
        $trace = self::trace($task['traceparent'] ?? null, $task['tracestate'] ?? null);
        $method = $task['method'] ?? 'GET';
        if (!is_string($method) || !in_array(strtoupper($method), ['GET', 'POST'], true)) {
            throw new TaskError('method must be GET or POST, got ' . self::shown($method));
        }
        $method = strtoupper($method);
        $body = $task['body'] ?? 'form';
        if ($body !== 'form' && $body !== 'json') {
            throw new TaskError("body must be 'form' or 'json', got " . self::shown($body));
        }
        $params = self::params($task['params'] ?? null, $paramsLimit);
        $persistent = $task['persistent'] ?? true;
        if (!is_bool($persistent)) {
            throw new TaskError('persistent must be true or false');
        }
        $priority = $task['priority'] ?? 2;
        if (!is_int($priority) || $priority < 1 || $priority > 3) {
            throw new TaskError('priority must be 1, 2 or 3, got ' . self::shown($priority));
        }
        $timeout = $task['timeout'] ?? null;
        if ($timeout !== null && (!self::isNumber($timeout) || $timeout <= 0 || $timeout > 86400)) {
            throw new TaskError('timeout must be a number of seconds in (0, 86400], got ' . self::shown($timeout));
        }
        $timeout = $timeout === null ? null : self::whole($timeout);
        [$intervals, $every, $cron, $tz] = self::schedule($task);
        $backoff = $intervals === null && $every === null && $cron === null;
        $retries = $task['retries'] ?? null;
        if ($retries !== null) {
            if (!is_int($retries) || $retries < 0 || $retries > self::MAX_RETRIES) {
                throw new TaskError('retries must be an integer from 0 to ' . self::MAX_RETRIES . ', got ' . self::shown($retries));
            }
            if (!$backoff) {
                $given = $intervals !== null ? 'intervals' : ($every !== null ? 'every' : 'cron');
                throw new TaskError("retries is for a task without a schedule: give retries or $given, not both");
            }
            if ($persistent === false) {
                throw new TaskError('give retries or persistent=false (one run, no retries), not both');
            }
        }
        // The spec as Task.spec_json writes it: the same fields, order and JSON text.
        foreach (['call', 'url', 'push', 'callback'] as $k) {
            if (isset($task[$k])) {
                $spec[] = '"' . $k . '":' . json_encode($task[$k], self::JSON);
            }
        }
        foreach (['timeout' => $timeout, 'every' => $every, 'cron' => $cron] as $k => $v) {
            if ($v !== null) {
                $spec[] = '"' . $k . '":' . json_encode($v, self::JSON);
            }
        }
        if ($url !== null || $method !== 'GET') {
            $spec[] = '"method":' . json_encode($method);
        }
        if ($body !== 'form') {
            $spec[] = '"body":' . json_encode($body);
        }
        if ($params !== null) {
            $spec[] = '"params":' . $params;
        }
        if ($intervals !== null && $every === null && $cron === null) {
            $spec[] = '"intervals":' . json_encode($intervals, self::JSON);
        }
        if ($persistent === false) {
            $spec[] = '"persistent":false';
        }
        if ($retries !== null) {
            $spec[] = '"retries":' . $retries;
        }
        if ($tz !== null && $tz !== 'UTC') {
            $spec[] = '"tz":' . json_encode($tz, self::JSON);
        }
        if ($signingKey !== null) {
            $spec[] = '"signing_key":' . json_encode($signingKey, self::JSON);
        }
        if ($trace !== null) {
            $spec[] = '"trace":' . json_encode($trace, self::JSON);
        }
        $this->spec = '{' . implode(',', $spec) . '}';
        $this->priority = $priority;
        [$this->mode, $this->value] = self::when($task, $intervals, $every, $cron);
    }

    /** The stored `trace` (delayd.model.task.trace_of): the traceparent, then a space and a well-formed tracestate. */
    private static function trace(mixed $traceparent, mixed $tracestate): ?string
    {
        if ($traceparent === null) {
            return null;
        }
        if (!is_string($traceparent) || !preg_match(self::TRACEPARENT, $traceparent)) {
            throw new TaskError("traceparent must be W3C's 00-<32 hex>-<16 hex>-<2 hex> (lowercase, ids not all zero), got "
                . self::shown($traceparent));
        }
        $state = is_string($tracestate) ? trim($tracestate) : '';
        return preg_match(self::TRACESTATE, $state) ? "$traceparent $state" : $traceparent;
    }

    /** A topic, id or list name: a string or an integer, 1-512 characters of UTF-8, no space or control character. */
    private static function name(string $what, mixed $value): string
    {
        if (is_int($value)) {
            $value = (string) $value;
        } elseif (!is_string($value)) {
            throw new TaskError("$what must be a string or an integer");
        }
        if ($value === '') {
            throw new TaskError("$what must not be empty");
        }
        if (!preg_match('//u', $value)) {
            throw new TaskError("$what is not valid UTF-8 text");
        }
        if (strlen($value) > self::MAX_NAME && preg_match_all('/./su', $value) > self::MAX_NAME) {
            throw new TaskError("$what is longer than " . self::MAX_NAME . ' characters');
        }
        if (preg_match('/[\x00-\x20\x7f]/', $value)) {
            throw new TaskError("$what must not contain spaces or control characters");
        }
        return $value;
    }

    private static function checkUrl(mixed $url): void
    {
        $parts = is_string($url) ? parse_url($url) : false;
        $scheme = is_array($parts) ? strtolower($parts['scheme'] ?? '') : '';
        if (!is_array($parts) || !in_array($scheme, ['http', 'https'], true) || ($parts['host'] ?? '') === '') {
            throw new TaskError('url must be an http:// or https:// URL with a host, got ' . self::shown($url));
        }
        $why = self::authorityError($url);
        if ($why !== null) {
            throw new TaskError("url $why, got " . self::shown($url));
        }
        if (!preg_match('//u', $url)) {
            throw new TaskError('url is not valid UTF-8 text');
        }
        if (preg_match('/[\x00-\x20\x7f]|[\x{80}-\x{9f}]|\s/u', $url)) {
            throw new TaskError('url must not contain spaces or control characters (percent-encode them), got '
                . self::shown($url));
        }
    }

    /**
     * Why the URL's authority cannot be sent to, or null: an empty host, a port that is not a number from 1
     * to 65535, a host that is not ASCII (given in its xn-- form); as delayd.model.checks.url_authority_error.
     */
    private static function authorityError(string $url): ?string
    {
        preg_match('~^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)~', $url, $found);
        $authority = $found[1] ?? '';
        $at = strrpos($authority, '@');
        $hostPort = $at === false ? $authority : substr($authority, $at + 1);
        if (!preg_match('~^(\[[^\]]+\]|[^:\[\]]*)(?::([0-9]*))?$~D', $hostPort, $m)) {
            return 'has a port that is not a number from 1 to 65535';
        }
        if ($m[1] === '') {
            return 'has no host';
        }
        $port = $m[2] ?? '';
        if ($port !== '' && (strlen($port) > 5 || (int) $port < 1 || (int) $port > 65535)) {
            return "has the port $port, not a number from 1 to 65535";
        }
        if (preg_match('/[\x80-\xff]/', $m[1])) {
            return 'has a host that is not ASCII: give an international name in its xn-- form (IDNA)';
        }
        return null;
    }

    /** The params as compact JSON, or null when there are none. */
    private static function params(mixed $params, int $limit): ?string
    {
        if ($params === null || $params === []) {
            return null;
        }
        if (is_object($params)) {
            $params = (array) $params;
            if ($params === []) {
                return null;
            }
        } elseif (!is_array($params) || array_is_list($params)) {
            throw new TaskError('params must be a JSON object (an array with string keys)');
        }
        try {
            $json = json_encode($params, self::JSON, self::MAX_PARAMS_DEPTH);
        } catch (\JsonException $e) {
            throw new TaskError(match ($e->getCode()) {
                JSON_ERROR_UTF8 => 'params are not valid UTF-8 text',
                JSON_ERROR_DEPTH => 'params are nested more than ' . self::MAX_PARAMS_DEPTH . ' levels deep',
                default => 'params are not JSON-serialisable: ' . $e->getMessage(),
            });
        }
        if (strlen($json) > $limit) {
            throw new TaskError('params are ' . strlen($json) . " bytes, more than the limit of $limit");
        }
        return $json;
    }

    /** [intervals, every, cron, tz], each null when not given (tz defaults to UTC for cron). */
    private static function schedule(array $task): array
    {
        $given = array_values(array_filter(['intervals', 'every', 'cron'], static fn ($k) => ($task[$k] ?? null) !== null));
        if (count($given) > 1) {
            throw new TaskError('give one of intervals, every or cron, not ' . implode(' and ', $given));
        }
        $tz = $task['tz'] ?? null;
        if (($task['cron'] ?? null) === null && $tz !== null) {
            throw new TaskError('tz is the zone of a cron schedule: give it with cron');
        }
        $intervals = isset($task['intervals']) ? self::intervals($task['intervals']) : null;
        $every = $task['every'] ?? null;
        if ($every !== null) {
            if (!self::isNumber($every) || !is_finite((float) $every) || $every < 1 || $every > self::TEN_YEARS) {
                throw new TaskError('every must be between 1 s and ten years, got ' . self::shown($every));
            }
            $every = self::whole($every);
        }
        $cron = isset($task['cron']) ? self::cron($task['cron']) : null;
        if ($cron !== null) {
            $tz ??= 'UTC';
            if (!is_string($tz) || !in_array($tz, \DateTimeZone::listIdentifiers(), true)) {
                throw new TaskError('unknown time zone ' . self::shown($tz) . ' (an IANA name like Europe/Berlin or UTC)');
            }
        }
        return [$intervals, $every, $cron, $tz];
    }

    /** `10`, `[0, 30, 60]` or `"0,30,60"` as a list of seconds. */
    private static function intervals(mixed $value): array
    {
        if (is_int($value) || is_float($value)) {
            $items = [$value];
        } elseif (is_string($value)) {
            $items = array_map('trim', explode(',', $value));
        } elseif (is_array($value) && array_is_list($value)) {
            $items = $value;
        } else {
            throw new TaskError("intervals must be seconds: a number, a list, or '0,30,60'");
        }
        if (!$items) {
            throw new TaskError('intervals must not be empty');
        }
        if (count($items) > 1000) {
            throw new TaskError('intervals may hold at most 1000 entries');
        }
        $out = [];
        foreach ($items as $item) {
            if (is_bool($item) || !is_numeric($item)) {
                throw new TaskError('interval ' . self::shown($item) . ' is not a number of seconds');
            }
            $number = (float) $item;
            if (!is_finite($number) || $number < 0) {
                throw new TaskError('interval ' . self::shown($item) . ' must be a finite number >= 0');
            }
            if ($number > self::TEN_YEARS) {
                throw new TaskError('interval ' . self::shown($item) . ' is longer than ten years');
            }
            $out[] = self::whole($number);
        }
        return $out;
    }

    /** A five-field cron expression, each field within its range, normalised to single spaces. */
    private static function cron(mixed $expr): string
    {
        if (!is_string($expr)) {
            throw new TaskError("cron must be a string like '0 3 * * *', got " . self::shown($expr));
        }
        $fields = preg_split('/\s+/', trim($expr));
        if (count($fields) !== 5) {
            throw new TaskError('cron needs five fields (minute hour day-of-month month day-of-week), got ' . self::shown($expr));
        }
        foreach ($fields as $i => $field) {
            [$what, $low, $high] = self::CRON[$i];
            foreach (explode(',', strtoupper($field)) as $part) {
                if (!self::cronPart($part, $i, $low, $high)) {
                    throw new TaskError('invalid cron expression ' . self::shown($expr) . ": bad $what field " . self::shown($part));
                }
            }
        }
        return implode(' ', $fields);
    }

    private static function cronPart(string $part, int $field, int $low, int $high): bool
    {
        $value = static function (string $text) use ($field, $low, $high): ?int {
            $named = array_search($text, self::NAMES[$field] ?? [], true);
            if ($named !== false) {
                return $named + ($field === 3 ? 1 : 0);
            }
            return ctype_digit($text) && (int) $text >= $low && (int) $text <= $high ? (int) $text : null;
        };
        if (!preg_match('~^(\*|\?|L|LW|[0-9A-Z]+W?|[0-9A-Z]+#[1-5]|[0-9A-Z]+L|[0-9A-Z]+-[0-9A-Z]+)(?:/([0-9]+))?$~D', $part, $m)) {
            return false;
        }
        if (isset($m[2]) && ((int) $m[2] < 1 || (int) $m[2] > $high)) {
            return false;
        }
        $range = rtrim(preg_replace('~#[1-5]$~', '', $m[1]), 'WL');
        if ($range === '' || $range === '*' || $range === '?') {
            return true;
        }
        $ends = explode('-', $range);
        foreach ($ends as $end) {
            if ($value($end) === null) {
                return false;
            }
        }
        return count($ends) === 1 || $value($ends[0]) <= $value($ends[1]);
    }

    /** [mode, value] for add.lua: delay/at (ms), '*' for a recurring task; next* for cron without delay/at. */
    private static function when(array $task, ?array $intervals, int|float|null $every, ?string $cron): array
    {
        $recurs = ($every !== null || $cron !== null) ? '*' : '';
        $delay = $task['delay'] ?? null;
        $at = $task['at'] ?? null;
        if ($delay !== null && $at !== null) {
            throw new TaskError('give delay or at, not both');
        }
        $debounce = $task['debounce'] ?? null;
        $maxWait = $task['max_wait'] ?? null;
        if ($debounce !== null || $maxWait !== null) {
            return ['debounce', self::debounced($debounce, $maxWait, $delay, $at, $recurs === '*')];
        }
        if ($at !== null) {
            return ['at' . $recurs, self::atMs($at)];
        }
        if ($delay === null && $cron !== null) {
            return ['next*', 0];  // the daemon gives it the calendar's next time (docs/protocol.md)
        }
        $delay ??= $every ?? ($intervals[0] ?? 0);
        if (!self::isNumber($delay) || $delay < 0 || $delay > self::TEN_YEARS) {
            throw new TaskError('delay must be a number of seconds from 0 to ten years, got ' . self::shown($delay));
        }
        return ['delay' . $recurs, (int) ($delay * 1000)];
    }

    /** add.lua's value of a debounced add, 'WAIT:MOST' in ms (delayd.client.base.debounced). */
    private static function debounced(mixed $debounce, mixed $maxWait, mixed $delay, mixed $at, bool $recurs): string
    {
        if ($debounce === null) {
            throw new TaskError('max_wait is the most a debounce may put a task off: give debounce too');
        }
        if ($delay !== null || $at !== null) {
            throw new TaskError('give debounce or delay/at, not both');
        }
        if ($recurs) {
            throw new TaskError('debounce is for a task without every or cron');
        }
        foreach (['debounce' => $debounce, 'max_wait' => $maxWait] as $name => $value) {
            if ($value !== null && (!self::isNumber($value) || $value < 0 || $value > self::TEN_YEARS)) {
                throw new TaskError(
                    "$name must be a number of seconds from 0 to ten years, got " . self::shown($value)
                );
            }
        }
        if ($maxWait !== null && $maxWait < $debounce) {
            throw new TaskError(sprintf('max_wait (%g s) must be at least debounce (%g s)', $maxWait, $debounce));
        }
        return (int) ($debounce * 1000) . ':' . ($maxWait === null ? '' : (int) ($maxWait * 1000));
    }

    private static function atMs(mixed $at): int
    {
        if ($at instanceof \DateTimeInterface) {
            return intdiv((int) $at->format('Uu'), 1000);
        }
        if (is_string($at) && is_numeric($at)) {
            $at = (float) $at;
        }
        if (self::isNumber($at)) {
            if ($at < 0 || $at >= 1e11) {
                throw new TaskError('at must be Unix seconds, got ' . self::shown($at));
            }
            return (int) ($at * 1000);
        }
        if (is_string($at)) {
            try {
                return self::atMs(new \DateTimeImmutable($at));
            } catch (\Exception) {
            }
        }
        throw new TaskError('at must be Unix seconds or an ISO 8601 time, got ' . self::shown($at));
    }

    private static function isNumber(mixed $v): bool
    {
        return is_int($v) || (is_float($v) && is_finite($v));
    }

    /** A whole number of seconds as an int (JSON `30`, not `30.0`), as Python writes it. */
    private static function whole(int|float|string $n): int|float
    {
        $f = (float) $n;
        return floor($f) === $f && abs($f) < 2 ** 53 ? (int) $f : $f;
    }

    private static function shown(mixed $v): string
    {
        $text = is_string($v) ? "'" . $v . "'" : json_encode($v, JSON_PARTIAL_OUTPUT_ON_ERROR);
        return strlen((string) $text) > 80 ? substr((string) $text, 0, 77) . '...' : (string) $text;
    }
}
