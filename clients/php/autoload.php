<?php
// The delayd PHP client without Composer: `require 'clients/php/autoload.php';` loads the
// Delayd\ classes from src/ on first use.
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Delayd\\')) {
        $file = __DIR__ . '/src/' . substr($class, strlen('Delayd\\')) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
