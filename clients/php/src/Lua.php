<?php
// The Lua scripts this package calls, shipped linked in lua/ (scripts/build-clients writes them with
// delayd's own linker, delayd/store/lua_lib.py, from delayd/store/lua): the very source, and so the
// SHA1, the Python client sends. Nothing outside the package is read.
declare(strict_types=1);

namespace Delayd;

final class Lua
{
    /** @var array<string, array{0: string, 1: string}> script name => [source, sha1] */
    private static array $loaded = [];

    /** @return array{0: string, 1: string} [source, sha1] of script `$name` (add, delete), read once per process */
    public static function script(string $name): array
    {
        if (!isset(self::$loaded[$name])) {
            $source = @file_get_contents(dirname(__DIR__) . "/lua/$name.lua");
            if ($source === false) {
                throw new StoreError("delayd/client is missing its script lua/$name.lua (a broken install)");
            }
            self::$loaded[$name] = [$source, sha1($source)];
        }
        return self::$loaded[$name];
    }
}
