<?php
// Written by scripts/build-clients from delayd/model/fields.py (the table of task fields): do not edit.
declare(strict_types=1);

namespace Delayd;

// CHECKS: each add argument's check (its kind; text: its pattern, refused with its message; refused unless a field it requires is given, saying `alone`), by name.
// ARGUMENTS: a task's own add arguments, in the order they are checked, each with its default.
// SPEC: [field, when it is written, the values it is not written for], in the spec's order (params: their JSON, or null).
// SHOWN: what get shows, each with its default.
final class Fields
{
    public const CHECKS = [
        'topic' => ['kind' => 'name'],
        'id' => ['kind' => 'name'],
        'call' => ['kind' => 'text', 'pattern' => '^[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*$', 'message' => 'must look like package.module:function'],
        'url' => ['kind' => 'url'],
        'push' => ['kind' => 'name', 'label' => 'push list'],
        'method' => ['kind' => 'enum', 'message' => 'must be GET or POST', 'values' => ['GET', 'POST'], 'fold' => true],
        'body' => ['kind' => 'enum', 'message' => 'must be \'form\' or \'json\'', 'values' => ['form', 'json']],
        'params' => ['kind' => 'params'],
        'intervals' => ['kind' => 'intervals', 'pattern' => '^\\s*-?(?:[0-9]+\\.?[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?\\s*$'],
        'persistent' => ['kind' => 'bool', 'message' => 'must be true or false', 'got' => false],
        'priority' => ['kind' => 'int', 'message' => 'must be 1, 2 or 3', 'low' => 1, 'high' => 3],
        'callback' => ['kind' => 'text', 'pattern' => '^[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*$', 'message' => 'must look like package.module:function'],
        'timeout' => ['kind' => 'number', 'message' => 'must be a number of seconds in (0, 86400]', 'low' => 0, 'high' => 86400, 'lowOpen' => true],
        'every' => ['kind' => 'number', 'message' => 'must be between 1 s and ten years', 'low' => 1, 'high' => 315360000, 'typeMessage' => 'must be a number of seconds'],
        'cron' => ['kind' => 'cron'],
        'tz' => ['kind' => 'zone', 'requires' => ['cron'], 'alone' => 'is the zone of a cron schedule: give it with cron'],
        'retries' => ['kind' => 'int', 'message' => 'must be an integer from 0 to 10000', 'low' => 0, 'high' => 10000],
        'signing_key' => ['kind' => 'text', 'pattern' => '^[A-Za-z0-9_.:-]{1,128}$', 'message' => 'must be 1-128 letters, digits, \'_\', \'.\', \':\' or \'-\'', 'requires' => ['url'], 'alone' => 'is for a url task: only URL requests are signed'],
        'traceparent' => ['kind' => 'text', 'pattern' => '^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$', 'message' => 'must be W3C\'s 00-<32 hex>-<16 hex>-<2 hex> (lowercase, ids not all zero)'],
        'tracestate' => ['kind' => 'tracestate'],
        'delay' => ['kind' => 'number', 'message' => 'must be a number of seconds from 0 to ten years', 'low' => 0, 'high' => 315360000],
        'at' => ['kind' => 'at', 'pattern' => '^\\s*-?(?:[0-9]+\\.?[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?\\s*$'],
        'debounce' => ['kind' => 'number', 'message' => 'must be a number of seconds from 0 to ten years', 'low' => 0, 'high' => 315360000],
        'max_wait' => ['kind' => 'number', 'message' => 'must be a number of seconds from 0 to ten years', 'low' => 0, 'high' => 315360000],
        'nx' => ['kind' => 'bool', 'message' => 'must be true or false', 'got' => false],
        'durable' => ['kind' => 'bool', 'message' => 'must be true or false', 'got' => false],
    ];
    public const ARGUMENTS = [
        'call' => null,
        'url' => null,
        'push' => null,
        'method' => 'GET',
        'body' => 'form',
        'params' => null,
        'intervals' => null,
        'persistent' => true,
        'priority' => 2,
        'callback' => null,
        'timeout' => null,
        'every' => null,
        'cron' => null,
        'tz' => null,
        'retries' => null,
        'signing_key' => null,
        'traceparent' => null,
        'tracestate' => null,
    ];
    public const SPEC = [
        ['call', 'set', []],
        ['url', 'set', []],
        ['push', 'set', []],
        ['callback', 'set', []],
        ['timeout', 'set', []],
        ['every', 'set', []],
        ['cron', 'set', []],
        ['method', 'with-url', ['GET']],
        ['body', 'changed', ['form']],
        ['params', 'set', []],
        ['intervals', 'scheduled', []],
        ['persistent', 'changed', [true]],
        ['retries', 'set', []],
        ['tz', 'changed', [null, 'UTC']],
        ['signing_key', 'set', []],
        ['trace', 'set', []],
    ];
    public const SHOWN = [
        'topic' => null,
        'id' => null,
        'key' => null,
        'call' => null,
        'url' => null,
        'push' => null,
        'method' => 'GET',
        'body' => 'form',
        'params' => [],
        'intervals' => [0],
        'persistent' => true,
        'priority' => 2,
        'callback' => null,
        'timeout' => null,
        'every' => null,
        'cron' => null,
        'tz' => null,
        'retries' => null,
        'status' => null,
        'created_at' => null,
        'due_at' => null,
        'last_run_at' => null,
        'last_due_at' => null,
        'runs' => null,
        'last_error' => null,
        'attempts' => null,
        'signing_key' => null,
        'traceparent' => null,
    ];
}
