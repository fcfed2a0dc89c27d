"""The lean HTTP/1.1 edge: a sans-IO server connection (httptools' llhttp parser) and a thin
asyncio shell, for the data plane's hot path (issue 15). It knows no gateway: routes, auth and
metrics sit in the handler given to `serve`.
"""
