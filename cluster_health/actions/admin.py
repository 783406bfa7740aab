"""Admin: alert channels (managed here), alerts, the delivery log, Slurm drains."""

from django.contrib import admin

from cluster_health.actions.models import Alert, AlertChannel, AlertDelivery, SlurmDrain


def read_only(model, *editable: str) -> tuple[str, ...]:
    """Every field of a model the actions write, in the model's order, but the editable ones (and the key)."""
    return tuple(f.name for f in model._meta.fields if not f.primary_key and f.name not in editable)


@admin.register(AlertChannel)
class AlertChannelAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "enabled", "from_env", "created")
    list_filter = ("kind", "enabled")
    list_editable = ("enabled",)


class DeliveryInline(admin.TabularInline):
    model = AlertDelivery
    extra = 0
    can_delete = False
    readonly_fields = read_only(AlertDelivery, "alert")  # the alert is the page's own


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("key", "kind", "severity", "status", "reason", "opened_by", "opened", "resolved")
    list_filter = ("status", "kind", "severity")
    search_fields = ("key", "subject", "text")
    readonly_fields = read_only(Alert, "status")
    inlines = [DeliveryInline]


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):
    list_display = ("created", "alert", "channel", "event", "status", "attempts", "sent", "last_error")
    list_filter = ("status", "event", "channel")
    readonly_fields = read_only(AlertDelivery)


@admin.register(SlurmDrain)
class SlurmDrainAdmin(admin.ModelAdmin):
    list_display = ("slurm_node", "node", "status", "sweep", "resumed_by", "drained", "ended", "reason")
    list_filter = ("status",)
    search_fields = ("node", "slurm_node", "reason")
    readonly_fields = read_only(SlurmDrain)
