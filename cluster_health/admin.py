"""Admin: nodes, sweeps with their findings, baselines, rejected messages and API tokens.

Schedules (the nightly full sweep, the reaper) are django-celery-beat's own admin pages.
"""

from django.contrib import admin

from cluster_health.models import AgentKey, ApiToken, Baseline, Finding, GroupProbe, Node, RejectedMessage, Sweep


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("name", "address", "topology_group", "active", "last_heartbeat", "retired_at", "agent_version")
    list_filter = ("active", "topology_group")
    search_fields = ("name", "address", "topology_group")
    readonly_fields = ("retired_at",)
    actions = ["retire", "activate"]

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
