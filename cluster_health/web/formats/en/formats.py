"""Date formats of every page, the admin's included: 24-hour, ISO order, with the zone (TIME_ZONE, UTC by default).

Django's own English formats are 12-hour ("Nov. 25, 2026, 10:51 p.m."), and the dashboard's pages
showed 24-hour UTC beside them; one format everywhere is this one (cluster_health.web.times).
"""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_INPUT_FORMATS = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]
DATE_INPUT_FORMATS = ["%Y-%m-%d"]
TIME_INPUT_FORMATS = ["%H:%M:%S", "%H:%M"]
