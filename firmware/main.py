# main.py - starts the node (wattnode/start.py), unless boot.py chose safe mode.
# Kept thin: everything lives in /lib/wattnode, which can be updated without touching this file.
from wattnode import safe

if safe.reason:
    print("safe mode:", safe.reason)
    print("the node is not running; connect with mpremote")
else:
    from wattnode import start
    start.main()
