"""URL map: dashboard pages, JSON API, metrics, health, admin, login."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from cluster_health.web import health, metrics

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", include("cluster_health.web.api_urls")),
    path("", include("cluster_health.web.urls")),
]
