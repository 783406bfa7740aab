"""Admin: nodes, sweeps with their findings, baselines, rejected messages and API tokens.

Schedules (the nightly full sweep, the reaper) are django-celery-beat's own admin pages.
"""

from django.contrib import admin

from cluster_health.models import ApiToken, Baseline, Finding, GroupProbe, Node, RejectedMessage, Sweep


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("name", "address", "last_heartbeat", "agent_version")
    search_fields = ("name", "address")


class FindingInline(admin.TabularInline):
    model = Finding
    extra = 0
    readonly_fields = ("severity", "code", "subject", "text")


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "backend", "status", "verdict", "source", "created", "finished")
    list_filter = ("kind", "status", "verdict", "source")
    readonly_fields = ("nodes", "current_round", "total_rounds", "started", "finished", "error")
    inlines = [FindingInline]


@admin.register(GroupProbe)
class GroupProbeAdmin(admin.ModelAdmin):
    list_display = ("id", "sweep", "kind", "status", "stage", "reason")


@admin.register(Baseline)
class BaselineAdmin(admin.ModelAdmin):
    list_display = ("name", "source", "from_sweep", "created")


@admin.register(RejectedMessage)
class RejectedMessageAdmin(admin.ModelAdmin):
    list_display = ("received", "task", "node", "error")
    readonly_fields = ("received", "task", "node", "error", "payload")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "created", "last_used")
    readonly_fields = ("token_hash", "last_used")
