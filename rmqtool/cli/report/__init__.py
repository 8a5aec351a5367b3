"""``rmqtool report``: the incident report (command.py), its data (gather.py) and its page
(page.py, with page.css and page.js inlined into every page)."""
