"""Shareable reports: a benchmark result, an A/B or a campaign as one self-contained HTML file
or as GitHub-flavoured Markdown.

* :mod:`tunedeck.report.parts`: what a report holds (sections of tables, charts, commands, notes),
  plain immutable data;
* :mod:`tunedeck.report.build`: the parts of a stored result or an A/B from the journal;
* :mod:`tunedeck.report.campaign`: a tuning campaign's (``tune --json FILE``), a partial one marked;
* :mod:`tunedeck.report.svg`: charts as inline SVG (nice axis ticks, no script);
* :mod:`tunedeck.report.htmlpage` and :mod:`tunedeck.report.markdown`: the two renderers;
* :mod:`tunedeck.report.load`: an id (result, sweep or A/B) to a report, and the file written safely.

No Textual, no network: everything a page shows is in the page.
"""
