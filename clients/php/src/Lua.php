<?php
// The Lua this package calls, shipped in lua/ (scripts/build-clients writes it with delayd's own linker,
// delayd/store/lua_lib.py, from delayd/store/lua): each script's linked source, and so the SHA1, the Python
// client sends with EVALSHA; the function library as Python loads it (library.lua) and the names Python calls
// it by (library.json). Nothing outside the package is read.
declare(strict_types=1);

namespace Delayd;

final class Lua
{
    /** @var array<string, array{0: string, 1: string}> script name => [source, sha1] */
    private static array $loaded = [];
    private static ?array $library = null;

    /** @return array{0: string, 1: string} [source, sha1] of script `$name` (add, delete), read once per process */
    public static function script(string $name): array
    {
        if (!isset(self::$loaded[$name])) {
            $source = self::read("$name.lua");
            self::$loaded[$name] = [$source, sha1($source)];
        }
        return self::$loaded[$name];
    }

    /**
     * delayd's function library, read once per process: code (what FUNCTION LOAD takes), library (its name),
     * functions (script name => function name), since (the first Redis [major, minor] with functions) and
     * probe (a function no library defines).
     * @return array{code: string, library: string, functions: array<string, string>, since: int[], probe: string}
     */
    public static function library(): array
    {
        return self::$library ??= json_decode(self::read('library.json'), true, 8, JSON_THROW_ON_ERROR)
            + ['code' => self::read('library.lua')];
    }

    private static function read(string $file): string
    {
        $text = @file_get_contents(dirname(__DIR__) . "/lua/$file");
        if ($text === false) {
            throw new StoreError("delayd/client is missing its file lua/$file (a broken install)");
        }
        return $text;
    }
}
