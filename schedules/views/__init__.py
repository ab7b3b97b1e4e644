"""The owner's dashboard: one surface over all three apps, each page a function view.

Pages that show runs, conversations or the budget live here too, at the top of the layers,
because they show them in the light of schedules; their URL names keep the namespaces of the
app whose data they show (`runs:`, `accounting:`), see schedules/urls.py.
"""
