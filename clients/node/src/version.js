// Written by scripts/build-clients from delayd/version.py and delayd/store/keys.py: do not edit.
export const VERSION = '1.0.0';
export const PROTOCOL = 1;
export const LAYOUT = 1;
