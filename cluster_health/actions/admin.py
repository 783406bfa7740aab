"""Admin: alert channels (managed here), alerts, the delivery log, Slurm drains."""

from django.contrib import admin

from cluster_health.actions.models import Alert, AlertChannel, AlertDelivery, SlurmDrain


@admin.register(AlertChannel)
class AlertChannelAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "enabled", "from_env", "created")
    list_filter = ("kind", "enabled")
    list_editable = ("enabled",)


class DeliveryInline(admin.TabularInline):
    model = AlertDelivery
    extra = 0
    can_delete = False
    readonly_fields = ("channel", "event", "status", "attempts", "last_error", "created", "sent")


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("key", "kind", "severity", "status", "reason", "opened_by", "opened", "resolved")
    list_filter = ("status", "kind", "severity")
    search_fields = ("key", "subject", "text")
    readonly_fields = (
        "key",
        "kind",
        "subject",
        "severity",
        "reason",
        "text",
        "url",
        "opened_by",
        "resolved_by",
        "data",
        "opened",
        "resolved",
    )
    inlines = [DeliveryInline]


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):
    list_display = ("created", "alert", "channel", "event", "status", "attempts", "sent", "last_error")
    list_filter = ("status", "event", "channel")
    readonly_fields = ("alert", "channel", "event", "status", "attempts", "last_error", "created", "sent")


@admin.register(SlurmDrain)
class SlurmDrainAdmin(admin.ModelAdmin):
    list_display = ("slurm_node", "node", "status", "sweep", "resumed_by", "drained", "ended", "reason")
    list_filter = ("status",)
    search_fields = ("node", "slurm_node", "reason")
    readonly_fields = ("node", "slurm_node", "sweep", "reason", "status", "resumed_by", "drained", "ended")
