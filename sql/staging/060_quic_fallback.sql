-- QUIC -> TCP fallback, per client and server (the server's address, or its SNI when known).
-- Each QUIC attempt is matched with the first TCP connection from the same client to the same
-- server that starts within 30 s after it (docs/signatures.md#quic-to-tcp-fallback):
--   race           TCP started within 300 ms of the QUIC attempt: both were tried at once
--   fallback       the QUIC handshake did not complete and TCP followed
--   cached_broken  TCP with no QUIC attempt before it, from a client whose QUIC to this server
--                  failed earlier (within an hour): the client remembered QUIC as broken
--   quic_ok        the QUIC handshake completed and no TCP followed
--   quic_failed    the QUIC handshake did not complete and no TCP followed
CREATE OR REPLACE VIEW quic_attempts AS
SELECT
    flow_id,
    client_ip,
    coalesce(sni, server_ip) AS server,
    "start",
    epoch_ns("start") AS start_ns,
    quic_handshake,
    quic_handshake = 'complete' AS quic_ok
FROM flows
WHERE protocol = 'quic';

CREATE OR REPLACE VIEW tcp_connections AS
SELECT flow_id, client_ip, coalesce(sni, server_ip) AS server, "start", epoch_ns("start") AS start_ns
FROM flows
WHERE protocol = 'tcp' AND server_port IN (443, 80, 8443);

CREATE OR REPLACE VIEW quic_fallback AS
WITH next_tcp AS (
    SELECT
        q.flow_id AS quic_flow_id,
        q.client_ip,
        q.server,
        q."start" AS quic_start,
        q.quic_ok,
        q.quic_handshake,
        min(t."start") AS tcp_start,
        arg_min(t.flow_id, t."start") AS tcp_flow_id
    FROM quic_attempts q
    LEFT JOIN tcp_connections t
      ON t.client_ip = q.client_ip AND t.server = q.server
     AND t.start_ns >= q.start_ns - 300000000        -- 300 ms
     AND t.start_ns <= q.start_ns + 30000000000      -- 30 s
    GROUP BY ALL
)
SELECT
    *,
    CASE
        WHEN tcp_start IS NOT NULL AND abs(epoch_ns(tcp_start) - epoch_ns(quic_start)) <= 300000000 THEN 'race'
        WHEN tcp_start IS NOT NULL AND NOT quic_ok THEN 'fallback'
        WHEN tcp_start IS NOT NULL THEN 'tcp_after_quic'
        WHEN quic_ok THEN 'quic_ok'
        ELSE 'quic_failed'
    END AS outcome
FROM next_tcp
UNION ALL
SELECT
    NULL AS quic_flow_id,
    t.client_ip,
    t.server,
    NULL AS quic_start,
    NULL AS quic_ok,
    NULL AS quic_handshake,
    t."start" AS tcp_start,
    t.flow_id AS tcp_flow_id,
    'cached_broken' AS outcome
FROM tcp_connections t
WHERE NOT EXISTS (
        SELECT 1 FROM quic_attempts q
        WHERE q.client_ip = t.client_ip AND q.server = t.server
          AND q.start_ns BETWEEN t.start_ns - 30000000000 AND t.start_ns + 300000000)
  AND EXISTS (
        SELECT 1 FROM quic_attempts q
        WHERE q.client_ip = t.client_ip AND q.server = t.server AND NOT q.quic_ok
          AND q.start_ns BETWEEN t.start_ns - 3600000000000 AND t.start_ns);
