"""Admin: nodes, sweeps with their findings, baselines, rejected messages and API tokens.

Schedules are django-celery-beat's admin pages, less the product's own jobs (the reaper, prune,
the offline check, beat's backend cleanup): disabling the reaper stalls every sweep, so they are
not listed there. Solar schedules, which nothing here uses, are not offered.
"""

from django.contrib import admin
from django_celery_beat.admin import PeriodicTaskAdmin
from django_celery_beat.models import PeriodicTask, SolarSchedule

from cluster_health import vocabulary
from cluster_health.models import (
    Acknowledgement,
    AgentKey,
    ApiToken,
    AuditEntry,
    Baseline,
    Finding,
    GroupProbe,
    Node,
    RejectedMessage,
    Sweep,
)

# The jobs the product runs for itself; an operator schedules sweeps (the Schedules page), never these.
INTERNAL_TASKS = (vocabulary.TASK_REAP, vocabulary.TASK_PRUNE, vocabulary.TASK_OFFLINE, "celery.backend_cleanup")


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "address",
        "topology_group",
        "seen",
        "state",
        "last_heartbeat",
        "retired_at",
        "agent_version",
    )
    list_filter = ("active", "topology_group")
    search_fields = ("name", "address", "topology_group")
    readonly_fields = ("retired_at",)
    actions = ["retire", "activate"]

    # Words, not the boolean icon: a green check beside an offline node read as "healthy" where it meant "not retired".
    # Not named "state": that is the operator's state (in service, maintenance), a field of the node itself,
    # which the admin would show in its place.
    @admin.display(description="online", ordering="active")
    def seen(self, node: Node) -> str:
        if not node.active:
            return "retired"
        return "online" if node.is_online() else "offline"

    @admin.action(description="Retire the selected nodes (sweeps leave them out)")
    def retire(self, request, queryset):
        for node in queryset.filter(active=True):
            node.retire()
        self.message_user(request, "Retired: sweeps without a node list leave these nodes out until activated.")

    @admin.action(description="Activate the selected nodes (back in the fleet)")
    def activate(self, request, queryset):
        for node in queryset.filter(active=False):
            node.activate()
        self.message_user(request, "Activated: sweeps cover these nodes again, and fail while they are offline.")


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


@admin.register(AgentKey)
class AgentKeyAdmin(admin.ModelAdmin):
    """Keys are made by `manage.py enroll` (the secret is shown once, in a file); here they are revoked."""

    list_display = ("node_name", "key_id", "created", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("node_name", "key_id")
    readonly_fields = ("node_name", "key_id", "created", "revoked_at")
    exclude = ("secret_sealed",)
    actions = ["revoke_keys"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected keys (their nodes are refused at once)")
    def revoke_keys(self, request, queryset):
        for key in queryset.filter(revoked_at__isnull=True):
            key.revoke()


ISSUE_TOKEN_HELP = (
    "API tokens are issued on the server with: python manage.py token issue USER --scope read|operate "
    "--expires-in DAYS [--name NAME] (the token is printed once; only its hash is kept here)"
)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """List, shorten and delete (revoke) tokens; adding one here is off, since the admin could never show its value."""

    list_display = ("name", "user", "scope", "created", "expires", "last_used")
    list_filter = ("scope",)
    readonly_fields = ("user", "token_hash", "scope", "created", "last_used")

    def has_add_permission(self, request):
        return False

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), "title": ISSUE_TOKEN_HELP})


admin.site.unregister(SolarSchedule)
admin.site.unregister(PeriodicTask)


@admin.register(PeriodicTask)
class SweepScheduleAdmin(PeriodicTaskAdmin):
    """django-celery-beat's periodic tasks without the product's own jobs (INTERNAL_TASKS)."""

    def get_queryset(self, request):
        return super().get_queryset(request).exclude(task__in=INTERNAL_TASKS)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The audit log, read-only: an entry records what happened; editing one would rewrite history."""

    list_display = ("created", "actor", "source", "action", "subject", "text", "sweep")
    list_filter = ("action", "source")
    search_fields = ("actor", "subject", "text")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Acknowledgement)
class AcknowledgementAdmin(admin.ModelAdmin):
    list_display = ("code", "subject", "severity", "by", "created", "ended", "ended_why")
    list_filter = ("code",)
    readonly_fields = ("finding", "subject", "code", "severity", "text", "by", "created", "ended", "ended_by")
