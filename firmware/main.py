# main.py - runs the wattnode program from config.json and board.json on the flash root.
# Kept thin: everything lives in /lib/wattnode, which can be updated without touching this file.
from wattnode import node

node.main()
