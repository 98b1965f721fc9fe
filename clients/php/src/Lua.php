<?php
// The package's Lua scripts linked with the _lib.lua helpers each one uses, exactly as
// delayd/store/lua_lib.py links them (a port of lua_lib.source, as clients/node/src/lua.js is):
// Redis runs a script's whole source on every call, so the whole lib in front of a single add
// cost Redis ~10 % more per call. tests/producers/test_php_client.py checks that both give the
// same text (and so the same SHA1) for every script.
declare(strict_types=1);

namespace Delayd;

final class Lua
{
    // A top-level definition starts at column 0: `local function f(`, `local a, b =` or `local a`.
    private const DEFINITION = '/^local[ \t]+(?:function[ \t]+(\w+)|([\w \t,]+?)[ \t]*(?:=|$))/m';
    // Long strings and comments, comments, quoted strings; else a name (not a field: `t.name`, `t:name`).
    private const TOKEN = '/--\[(=*)\[.*?\]\1\]|\[(=*)\[.*?\]\2\]|--[^\n]*|\'(?:\\\\.|[^\'\\\\\n])*\''
        . '|"(?:\\\\.|[^"\\\\\n])*"|(?<![.:\w])([A-Za-z_]\w*)/s';
    private const LIB_HERE = '--[[lib]]';
    // A `--[[lib]]` line and the script function around it (column-0 `local function` ... `end`).
    private const RARE_FUNCTION = '/^local function [^\n]*\n(?:(?!end\b)[^\n]*\n)*?[ \t]*--\[\[lib\]\][ \t]*\n'
        . '(?:(?!end\b)[^\n]*\n)*end\b/m';

    /** `$script` as Redis runs it: the lib definitions it uses in front of it (see lua_lib.py). */
    public static function link(string $lib, string $script): string
    {
        $defs = self::definitions($lib);
        preg_match_all(self::RARE_FUNCTION, $script, $rare, PREG_OFFSET_CAPTURE | PREG_SET_ORDER);
        if (substr_count($script, self::LIB_HERE) !== count($rare)) {
            throw new StoreError(self::LIB_HERE . ' outside a column-0 `local function ... end`');
        }
        $outside = '';
        $at = 0;
        $data = '';
        foreach ($rare as [[$text, $start]]) {
            $outside .= substr($script, $at, $start - $at);
            $at = $start + strlen($text);
            foreach (self::needed($defs, $text) as $d) {
                $data .= $d['function'] ? '' : $d['source'];
            }
        }
        $outside .= substr($script, $at);
        $front = self::needed($defs, $outside . $data);
        $parts = '';
        $at = 0;
        foreach ($rare as [[$text, $start]]) {
            $marker = strpos($script, self::LIB_HERE, $start);
            $line = strrpos(substr($script, 0, $marker), "\n") + 1;  // the marker's line is replaced
            $parts .= substr($script, $at, $line - $at);
            foreach (self::needed($defs, $text) as $i => $d) {
                $parts .= isset($front[$i]) ? '' : $d['source'];
            }
            $at = strpos($script, "\n", $marker) + 1;
        }
        return implode('', array_column($front, 'source')) . "\n" . $parts . substr($script, $at);
    }

    /** @return array<string, true> the names `$source` mentions outside comments and strings */
    private static function namesIn(string $source): array
    {
        preg_match_all(self::TOKEN, $source, $m);
        return array_fill_keys(array_filter($m[3], 'strlen'), true);
    }

    /** The lib's top-level definitions, in order, each with its comment lines just above it. */
    private static function definitions(string $lib): array
    {
        $lines = explode("\n", $lib);
        preg_match_all(self::DEFINITION, $lib, $found, PREG_OFFSET_CAPTURE | PREG_SET_ORDER);
        $starts = [];
        foreach ($found as $m) {
            $line = substr_count($lib, "\n", 0, $m[0][1]);
            while ($line > 0 && str_starts_with($lines[$line - 1], '--')) {  // its comment goes with it
                $line--;
            }
            $offset = $line ? strlen(implode("\n", array_slice($lines, 0, $line))) + 1 : 0;
            $function = isset($m[1]) && $m[1][0] !== '';
            $names = array_map('trim', explode(',', $function ? $m[1][0] : $m[2][0]));
            $starts[] = [$offset, array_fill_keys($names, true), $function];
        }
        $defs = [];
        foreach ($starts as $i => [$offset, $names, $function]) {
            $end = $starts[$i + 1][0] ?? strlen($lib);
            $source = substr($lib, $offset, $end - $offset);
            $defs[] = ['names' => $names, 'source' => $source, 'function' => $function,
                'uses' => array_diff_key(self::namesIn($source), $names)];
        }
        return $defs;
    }

    /** The definitions `$source` uses, directly or through others, in lib order (keyed by position). */
    private static function needed(array $defs, string $source): array
    {
        $wanted = self::namesIn($source);
        foreach (array_reverse($defs) as $d) {  // a definition uses only those above it
            if (array_intersect_key($d['names'], $wanted)) {
                $wanted += $d['uses'];
            }
        }
        return array_filter($defs, static fn (array $d): bool => (bool) array_intersect_key($d['names'], $wanted));
    }
}
