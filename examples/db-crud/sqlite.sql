-- The DbCrud schema and its seed rows, for SQLite (run at every start: idempotent).
-- Seed row n (1..100000) is defined in docs/databases.md; the benchmark checks reads against it.
CREATE TABLE IF NOT EXISTS customers (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  first_name TEXT    NOT NULL,
  last_name  TEXT    NOT NULL,
  email      TEXT    NOT NULL UNIQUE,
  tier       TEXT    NOT NULL DEFAULT 'standard',
  city       TEXT,
  country    TEXT,
  balance    NUMERIC NOT NULL DEFAULT 0,
  active     BOOLEAN NOT NULL DEFAULT 1,
  created_at TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

INSERT INTO customers (id, first_name, last_name, email, tier, city, country, balance, active, created_at)
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 100000)
SELECT n, 'First' || n, 'Last' || n, 'customer' || n || '@example.com',
       CASE n % 2 WHEN 0 THEN 'premium' ELSE 'standard' END,
       'City' || (n % 100), 'Country' || (n % 20),
       (n % 1000) * 4 + 0.25, n % 3 <> 0,
       strftime('%Y-%m-%dT%H:%M:%SZ', 1767225600 + n, 'unixepoch')
FROM seq
WHERE NOT EXISTS (SELECT 1 FROM customers);

CREATE TABLE IF NOT EXISTS orders (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  customer_id INTEGER NOT NULL REFERENCES customers (id) CHECK (typeof(customer_id) = 'integer'),
  item        TEXT    NOT NULL,
  quantity    INTEGER NOT NULL CHECK (typeof(quantity) = 'integer' AND quantity > 0),
  price       NUMERIC NOT NULL CHECK (typeof(price) IN ('integer', 'real')),
  status      TEXT    NOT NULL DEFAULT 'new',
  created_at  TIMESTAMP NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
