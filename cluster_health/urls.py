"""URL map: dashboard pages, JSON API, metrics, health, admin, login."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from cluster_health.web import health, metrics
from cluster_health.web.login_throttle import (
    ThrottledAdminAuthenticationForm,
    ThrottledAuthenticationForm,
    throttled_status,
)

admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path(
        "accounts/login/",
        throttled_status(auth_views.LoginView.as_view(authentication_form=ThrottledAuthenticationForm)),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/login/", throttled_status(admin.site.login)),  # before admin/: the same view, answering 429
    path("admin/", admin.site.urls),
    path("api/", include("cluster_health.web.api_urls")),
    path("", include("cluster_health.web.urls")),
]
