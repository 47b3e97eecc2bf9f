-- A view: the orders that count (a returned order does not).
select order_id, customer_id, amount, ordered_at
from {{ ref('orders') }}
where status <> 'returned'
