-- A singular test: the rows it returns are failures.
{{ config(cluster='analytics') }}
select * from {{ ref('customer_totals') }} where total <= 0 or orders < 1
