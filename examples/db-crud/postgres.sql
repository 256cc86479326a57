-- The DbCrud schema and its seed rows, for PostgreSQL (run at every start: idempotent).
-- Seed row n (1..100000) is defined in docs/databases.md; the benchmark checks reads against it.
CREATE TABLE IF NOT EXISTS customers (
  id         BIGSERIAL PRIMARY KEY,
  first_name TEXT NOT NULL,
  last_name  TEXT NOT NULL,
  email      TEXT NOT NULL UNIQUE,
  tier       TEXT NOT NULL DEFAULT 'standard',
  city       TEXT,
  country    TEXT,
  balance    NUMERIC(14, 2) NOT NULL DEFAULT 0,
  active     BOOLEAN NOT NULL DEFAULT true,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO customers (id, first_name, last_name, email, tier, city, country, balance, active, created_at)
SELECT n, 'First' || n, 'Last' || n, 'customer' || n || '@example.com',
       CASE n % 2 WHEN 0 THEN 'premium' ELSE 'standard' END,
       'City' || (n % 100), 'Country' || (n % 20),
       (n % 1000) * 4 + 0.25, n % 3 <> 0,
       to_timestamp(1767225600 + n)
FROM generate_series(1, 100000) AS n
WHERE NOT EXISTS (SELECT 1 FROM customers);

-- Inserted ids continue after the seeds.
SELECT setval(pg_get_serial_sequence('customers', 'id'), GREATEST((SELECT max(id) FROM customers), 1));

CREATE TABLE IF NOT EXISTS orders (
  id          BIGSERIAL PRIMARY KEY,
  customer_id BIGINT  NOT NULL REFERENCES customers (id),
  item        TEXT    NOT NULL,
  quantity    INTEGER NOT NULL CHECK (quantity > 0),
  price       NUMERIC(14, 2) NOT NULL,
  status      TEXT    NOT NULL DEFAULT 'new',
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
