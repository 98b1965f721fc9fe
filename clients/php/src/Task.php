<?php
// One task's arguments checked as Python's Client.add checks them (delayd/model/task.py and
// delayd/client/base.py), and turned into add.lua's spec, priority, mode and value (docs/protocol.md). What
// each field may hold is the table of fields (Fields.php, written from delayd/model/fields.py); here is what
// no table says: names, URLs, params, intervals, cron and zones, the rules between fields, and when a task
// first runs. The script checks again whatever the daemon would misread; these checks are for messages a user
// can act on. Cron expressions are checked field by field here; their first due time is the daemon's (next*).
declare(strict_types=1);

namespace Delayd;

final class Task
{
    private const OPTIONS = ['topic', 'id', 'intervalTime', 'delay', 'at', 'debounce', 'max_wait'];
    private const TRACESTATE = '/^[!-~](?:[ -~]{0,510}[!-~])?$/D';  // a tracestate kept with its traceparent
    private const JSON = JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR;
    private const MAX_DEPTH = 64;  // params nest at most this deep, the params object being level 1
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
        $unknown = array_diff(array_keys($task), self::OPTIONS, array_keys(Fields::ARGUMENTS));
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
        $this->member = str_contains($id, ':') ? throw new TaskError("id must not contain ':' (the key is topic:id)")
            : "$this->topic:$id";
        if (count(array_filter(['call', 'url', 'push'], static fn ($k) => ($task[$k] ?? '') !== '')) !== 1) {
            throw new TaskError('give exactly one of call, url or push');
        }
        $t = [];  // each argument as kept: checked by its kind (null is "not given" where the default is null)
        foreach (Fields::ARGUMENTS as $name => $absent) {
            $given = array_key_exists($name, $task) && ($task[$name] !== null || $absent !== null);
            $t[$name] = $given ? self::checked($name, $task[$name], $paramsLimit) : $absent;
        }
        foreach (Fields::CHECKS as $name => $check) {
            $requires = $check['requires'] ?? [];
            if ($requires && $t[$name] !== null && !array_filter($requires, static fn ($k) => $t[$k] !== null)) {
                throw new TaskError("$name {$check['alone']}");
            }
        }
        $given = array_values(array_filter(['intervals', 'every', 'cron'], static fn ($k) => $t[$k] !== null));
        if (count($given) > 1) {
            throw new TaskError('give one of intervals, every or cron, not ' . implode(' and ', $given));
        }
        if ($t['retries'] !== null && $given) {
            throw new TaskError("retries is for a task without a schedule: give retries or {$given[0]}, not both");
        }
        if ($t['retries'] !== null && $t['persistent'] === false) {
            throw new TaskError('give retries or persistent=false (one run, no retries), not both');
        }
        $state = is_string($t['tracestate']) ? trim($t['tracestate']) : '';
        $t['trace'] = $t['traceparent'] === null ? null
            : $t['traceparent'] . (preg_match(self::TRACESTATE, $state) ? " $state" : '');
        $t['tz'] = $t['cron'] === null ? null : $t['tz'] ?? 'UTC';
        $spec = [];  // as Python's spec_json writes it: the same fields, order and JSON text
        foreach (Fields::SPEC as [$name, $written, $omit]) {
            if ($written === 'set' ? $t[$name] !== null : ($written === 'scheduled' ? $given === ['intervals']
                : !in_array($t[$name], $omit, true) || ($written === 'with-url' && $t['url'] !== null))) {
                $spec[] = "\"$name\":" . ($name === 'params' ? $t[$name] : json_encode($t[$name], self::JSON));
            }
        }
        $this->spec = '{' . implode(',', $spec) . '}';
        $this->priority = $t['priority'];
        [$this->mode, $this->value] = self::when($task, $t);
    }

    /** Field `$name`'s value as kept, checked by its kind of the table (Fields.php), or a TaskError: its line. */
    private static function checked(string $name, mixed $value, int $limit = 0): mixed
    {
        $c = Fields::CHECKS[$name];
        $number = is_int($value) || is_float($value);
        $folded = ($c['fold'] ?? false) && is_string($value) ? strtoupper($value) : $value;
        $ok = match ($c['kind']) {
            'name' => self::name($c['label'] ?? $name, $value),
            'text' => is_string($value) && preg_match('/' . str_replace('/', '\/', $c['pattern']) . '/Du', $value),
            'enum' => in_array($folded, $c['values'], true),
            'bool' => is_bool($value),
            'int' => is_int($value) && $value >= $c['low'] && $value <= $c['high'],
            'number' => $number && $value <= $c['high'] && ($c['lowOpen'] ?? false ? $value > $c['low'] : $value >= $c['low']),
            'url' => self::url($value),
            'params' => self::params($value, $limit),
            'intervals' => self::intervals($value),
            'cron' => self::cron($value),
            'zone' => self::zone($value),
            default => true,
        };
        if ($ok === false) {
            $message = $c['kind'] === 'number' && !$number ? $c['typeMessage'] ?? $c['message'] : $c['message'];
            throw new TaskError("$name $message" . (($c['got'] ?? true) ? ', got ' . self::shown($value) : ''));
        }
        return match ($c['kind']) {
            'name', 'url', 'params', 'intervals', 'cron', 'zone' => $ok,
            'enum' => $folded,
            'number' => self::whole($value),
            default => $value,
        };
    }

    /** A topic, id or list name: a string or an integer, 1-512 characters of UTF-8, no space or control character. */
    private static function name(string $what, mixed $value): string
    {
        if (!is_string($value) && !is_int($value)) {
            throw new TaskError("$what must be a string or an integer");
        }
        $value = (string) $value;
        $why = match (true) {
            $value === '' => 'must not be empty',
            strlen($value) > 512 && preg_match_all('/./su', $value) > 512 => 'is longer than 512 characters',
            (bool) preg_match('/[\x00-\x20\x7f]/', $value) => 'must not contain spaces or control characters',
            !preg_match('//u', $value) => 'is not valid UTF-8 text',
            default => null,
        };
        return $why === null ? $value : throw new TaskError("$what $why");
    }

    /** An http(s) URL with a host, a port from 1 to 65535, an ASCII host, no whitespace or control character. */
    private static function url(mixed $url): string
    {
        $parts = is_string($url) ? parse_url($url) : false;
        $scheme = strtolower($parts['scheme'] ?? '');
        if (!is_array($parts) || !in_array($scheme, ['http', 'https'], true) || ($parts['host'] ?? '') === '') {
            throw new TaskError('url must be an http:// or https:// URL with a host, got ' . self::shown($url));
        }
        preg_match('~^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#]*@)?([^/?#]*)~', $url, $found);  // (past the last '@')
        $ok = preg_match('~^(\[[^\]]+\]|[^:\[\]]*)(?::([0-9]*))?$~D', $found[1] ?? '', $m);
        $port = $m[2] ?? '';
        $why = match (true) {
            !$ok => 'has a port that is not a number from 1 to 65535',
            $m[1] === '' => 'has no host',
            $port !== '' && (strlen($port) > 5 || (int) $port < 1 || (int) $port > 65535)
                => "has the port $port, not a number from 1 to 65535",
            (bool) preg_match('/[\x80-\xff]/', $m[1])
                => 'has a host that is not ASCII: give an international name in its xn-- form (IDNA)',
            !preg_match('//u', $url) => throw new TaskError('url is not valid UTF-8 text'),
            (bool) preg_match('/[\x00-\x20\x7f]|[\x{80}-\x{9f}]|\s/u', $url)
                => 'must not contain spaces or control characters (percent-encode them)',
            default => null,
        };
        return $why === null ? $url : throw new TaskError("url $why, got " . self::shown($url));
    }

    /** The params as compact JSON, or null when there are none. */
    private static function params(mixed $params, int $limit): ?string
    {
        if (is_object($params)) {
            $params = (array) $params;
        } elseif (!is_array($params) || ($params !== [] && array_is_list($params))) {
            throw new TaskError('params must be a JSON object (an array with string keys)');
        }
        try {
            $json = $params === [] ? null : json_encode($params, self::JSON, self::MAX_DEPTH);
        } catch (\JsonException $e) {
            throw new TaskError(match ($e->getCode()) {
                JSON_ERROR_UTF8 => 'params are not valid UTF-8 text',
                JSON_ERROR_DEPTH => 'params are nested more than ' . self::MAX_DEPTH . ' levels deep',
                default => 'params are not JSON-serialisable: ' . $e->getMessage(),
            });
        }
        if (strlen($json ?? '') > $limit) {
            throw new TaskError('params are ' . strlen($json) . " bytes, more than the limit of $limit");
        }
        return $json;
    }

    /** `10`, `[0, 30, 60]` or `"0,30,60"` as a list of seconds. */
    private static function intervals(mixed $value): array
    {
        $items = match (true) {
            is_int($value), is_float($value) => [$value],
            is_string($value) => array_map('trim', explode(',', $value)),
            is_array($value) && array_is_list($value) => $value,
            default => throw new TaskError("intervals must be seconds: a number, a list, or '0,30,60'"),
        };
        if (!$items || count($items) > 1000) {
            throw new TaskError($items ? 'intervals may hold at most 1000 entries' : 'intervals must not be empty');
        }
        $out = [];
        foreach ($items as $item) {
            $why = match (true) {
                !is_int($item) && !is_float($item) && !self::decimal($item) => 'is not a number of seconds',
                !is_finite((float) $item) || $item < 0 => 'must be a finite number >= 0',
                $item > Fields::CHECKS['delay']['high'] => 'is longer than ten years',
                default => null,
            };
            $out[] = $why === null ? self::whole($item) : throw new TaskError('interval ' . self::shown($item) . " $why");
        }
        return $out;
    }

    /** An IANA zone name. */
    private static function zone(mixed $tz): string
    {
        return is_string($tz) && in_array($tz, \DateTimeZone::listIdentifiers(), true) ? $tz
            : throw new TaskError('unknown time zone ' . self::shown($tz) . ' (an IANA name like Europe/Berlin or UTC)');
    }

    /** A five-field cron expression, each field within its range, normalised to single spaces. */
    private static function cron(mixed $expr): string
    {
        if (!is_string($expr)) {
            throw new TaskError("cron must be a string like '0 3 * * *', got " . self::shown($expr));
        }
        $fields = preg_split('/\s+/', trim($expr));
        if (count($fields) !== 5) {
            throw new TaskError('cron needs five fields (minute hour day-of-month month day-of-week), got '
                . self::shown($expr));
        }
        foreach ($fields as $i => $field) {
            [$what, $low, $high] = self::CRON[$i];
            foreach (explode(',', strtoupper($field)) as $part) {
                if (!self::cronPart($part, $i, $low, $high)) {
                    throw new TaskError('invalid cron expression ' . self::shown($expr) . ": bad $what field "
                        . self::shown($part));
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
        $shape = '~^(\*|\?|L|LW|[0-9A-Z]+W?|[0-9A-Z]+#[1-5]|[0-9A-Z]+L|[0-9A-Z]+-[0-9A-Z]+)(?:/([0-9]+))?$~D';
        if (!preg_match($shape, $part, $m) || (isset($m[2]) && ((int) $m[2] < 1 || (int) $m[2] > $high))) {
            return false;
        }
        $range = rtrim(preg_replace('~#[1-5]$~', '', $m[1]), 'WL');
        if ($range === '' || $range === '*' || $range === '?') {
            return true;
        }
        $ends = array_map($value, explode('-', $range));
        return !in_array(null, $ends, true) && (count($ends) === 1 || $ends[0] <= $ends[1]);
    }

    /** [mode, value] for add.lua: delay/at (ms), '*' for a recurring task; next* for cron without delay/at. */
    private static function when(array $task, array $t): array
    {
        $recurs = ($t['every'] !== null || $t['cron'] !== null) ? '*' : '';
        [$delay, $at] = [$task['delay'] ?? null, $task['at'] ?? null];
        [$debounce, $maxWait] = [$task['debounce'] ?? null, $task['max_wait'] ?? null];
        if ($delay !== null && $at !== null) {
            throw new TaskError('give delay or at, not both');
        }
        if ($debounce !== null || $maxWait !== null) {
            $why = match (true) {
                $debounce === null => 'max_wait is the most a debounce may put a task off: give debounce too',
                $delay !== null || $at !== null => 'give debounce or delay/at, not both',
                $recurs === '*' => 'debounce is for a task without every or cron',
                self::checked('debounce', $debounce) > ($maxWait === null ? INF : self::checked('max_wait', $maxWait))
                    => sprintf('max_wait (%g s) must be at least debounce (%g s)', $maxWait, $debounce),
                default => null,
            };
            if ($why !== null) {
                throw new TaskError($why);
            }
            return ['debounce', (int) ($debounce * 1000) . ':' . ($maxWait === null ? '' : (int) ($maxWait * 1000))];
        }
        if ($at !== null) {
            return ['at' . $recurs, self::atMs($at)];
        }
        if ($delay === null && $t['cron'] !== null) {
            return ['next*', 0];  // the daemon gives it the calendar's next time (docs/protocol.md)
        }
        return ['delay' . $recurs, (int) (self::checked('delay', $delay ?? $t['every'] ?? $t['intervals'][0] ?? 0) * 1000)];
    }

    private static function atMs(mixed $at): int
    {
        if ($at instanceof \DateTimeInterface) {
            return intdiv((int) $at->format('Uu'), 1000);
        }
        if (self::decimal($at)) {
            $at = (float) $at;
        }
        if (is_int($at) || (is_float($at) && is_finite($at))) {
            if ($at < 0 || $at >= 1e11) {
                throw new TaskError('at must be Unix seconds, got ' . self::shown($at));
            }
            return (int) ($at * 1000);
        }
        try {
            return is_string($at) ? self::atMs(new \DateTimeImmutable($at)) : throw new \Exception();
        } catch (\Exception) {
            throw new TaskError('at must be Unix seconds or an ISO 8601 time, got ' . self::shown($at));
        }
    }

    /** Whether `$text` is a number written as text, as Python reads one (the table's pattern of intervals). */
    private static function decimal(mixed $text): bool
    {
        return is_string($text) && preg_match('/' . Fields::CHECKS['intervals']['pattern'] . '/D', $text) === 1;
    }

    /** A whole number of seconds as an int (JSON `30`, not `30.0`), as Python writes it. */
    private static function whole(int|float|string $n): int|float
    {
        $f = (float) $n;
        return floor($f) === $f && abs($f) < 2 ** 53 ? (int) $f : $f;
    }

    /** A value for a refusal's message: a string quoted, its control characters escaped as Python's repr does
     * (the message stays one line). */
    private static function shown(mixed $v): string
    {
        $escape = static fn ($m) => ["\n" => '\n', "\r" => '\r', "\t" => '\t'][$m[0]]
            ?? sprintf('\x%02x', ord(substr($m[0], -1)));  // (a C1 control is \xc2 and its own byte in UTF-8)
        $text = is_string($v) ? "'" . preg_replace_callback('/[\x00-\x1f\x7f]|\xc2[\x80-\x9f]/', $escape, $v) . "'"
            : json_encode($v, JSON_PARTIAL_OUTPUT_ON_ERROR);
        return strlen((string) $text) > 80 ? substr((string) $text, 0, 77) . '...' : (string) $text;
    }
}
