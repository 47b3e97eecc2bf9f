{# Create the example's cluster unless it exists (CREATE CLUSTER has no IF NOT EXISTS). #}
{% macro ensure_cluster(name, size) %}
  {% if execute and not cluster_exists(name) %}
    {% do run_query("create cluster " ~ adapter.quote(name) ~ " (size = '" ~ size ~ "')") %}
  {% endif %}
{% endmacro %}
