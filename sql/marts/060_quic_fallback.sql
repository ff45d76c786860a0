-- QUIC -> TCP fallback, per client and server (docs/signatures.md#quic-to-tcp-fallback; scored
-- against real clients in the QUIC lab, tests/test_lab_quic.py).
-- A server is its SNI when known, else its address; a TCP connection without SNI (cancelled in
-- SYN_SENT when QUIC won a race: no ClientHello) matches a QUIC attempt by the server's address.
-- Each QUIC attempt is paired with the first TCP connection from the same client to the same
-- server that starts from 300 ms before it to 30 s after it, and before the client's next QUIC
-- attempt to that server (less 300 ms): the window does not reach into the next session.
--   race           TCP started within 300 ms of the QUIC attempt and before its last packet: both
--                  were tried at once
--   fallback       the QUIC handshake did not complete and TCP followed (also at once, when the
--                  attempt failed fast: ICMP port unreachable, no common version)
--   tcp_after_quic the QUIC handshake completed and TCP followed anyway
--   quic_ok        the QUIC handshake completed and no TCP followed
--   quic_failed    the QUIC handshake did not complete and no TCP followed
--   cached_broken  a TCP connection that is no attempt's paired TCP, from a client whose QUIC to
--                  this server failed within the hour before: the client remembered QUIC as broken
-- ended_on_tcp (QUIC attempts; NULL on cached_broken rows): the session that began with this
-- attempt got its answer over TCP - a fallback, or a race the QUIC handshake did not complete.
CREATE OR REPLACE VIEW quic_attempts AS
SELECT
    flow_id,
    client_ip,
    server_ip,
    sni,
    coalesce(sni, server_ip) AS server,
    "start",
    epoch_ns("start") AS start_ns,
    epoch_ns("end") AS end_ns,
    quic_handshake,
    quic_handshake = 'complete' AS quic_ok,
    lead(epoch_ns("start")) OVER (PARTITION BY client_ip, coalesce(sni, server_ip) ORDER BY "start")
        AS next_start_ns
FROM flows
WHERE protocol = 'quic';

CREATE OR REPLACE VIEW tcp_connections AS
SELECT
    flow_id,
    client_ip,
    server_ip,
    sni,
    coalesce(sni, server_ip) AS server,
    "start",
    epoch_ns("start") AS start_ns,
    epoch_ns("end") AS end_ns
FROM flows
WHERE protocol = 'tcp' AND server_port IN (443, 80, 8443);

CREATE OR REPLACE VIEW quic_fallback AS
WITH pairs AS (
    SELECT q.flow_id AS quic_flow_id, t.flow_id AS tcp_flow_id, t."start" AS tcp_start, t.start_ns AS tcp_start_ns
    FROM quic_attempts q
    JOIN tcp_connections t
      ON t.client_ip = q.client_ip
     AND (t.sni = q.sni OR (t.sni IS NULL AND t.server_ip = q.server_ip))
     AND t.start_ns >= q.start_ns - 300000000                                    -- 300 ms
     AND t.start_ns <= q.start_ns + 30000000000                                  -- 30 s
     AND (q.next_start_ns IS NULL OR t.start_ns < q.next_start_ns - 300000000)
),
first_tcp AS (
    SELECT
        q.flow_id,
        q.client_ip,
        q.server,
        q."start",
        q.start_ns,
        q.end_ns,
        q.quic_ok,
        q.quic_handshake,
        min(p.tcp_start) AS tcp_start,
        min(p.tcp_start_ns) AS tcp_start_ns,
        arg_min(p.tcp_flow_id, p.tcp_start_ns) AS tcp_flow_id
    FROM quic_attempts q
    LEFT JOIN pairs p ON p.quic_flow_id = q.flow_id
    GROUP BY ALL
),
outcomes AS (
    SELECT
        *,
        CASE
            WHEN tcp_start_ns IS NOT NULL AND abs(tcp_start_ns - start_ns) <= 300000000
                 AND tcp_start_ns < end_ns THEN 'race'
            WHEN tcp_start_ns IS NOT NULL AND NOT quic_ok THEN 'fallback'
            WHEN tcp_start_ns IS NOT NULL THEN 'tcp_after_quic'
            WHEN quic_ok THEN 'quic_ok'
            ELSE 'quic_failed'
        END AS outcome
    FROM first_tcp
)
SELECT
    flow_id AS quic_flow_id,
    client_ip,
    server,
    "start" AS quic_start,
    quic_ok,
    quic_handshake,
    tcp_start,
    tcp_flow_id,
    outcome,
    outcome = 'fallback' OR (outcome = 'race' AND NOT quic_ok) AS ended_on_tcp
FROM outcomes
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
    'cached_broken' AS outcome,
    NULL AS ended_on_tcp
FROM tcp_connections t
WHERE t.flow_id NOT IN (SELECT tcp_flow_id FROM first_tcp WHERE tcp_flow_id IS NOT NULL)
  AND EXISTS (
        SELECT 1 FROM quic_attempts q
        WHERE q.client_ip = t.client_ip
          AND (t.sni = q.sni OR (t.sni IS NULL AND t.server_ip = q.server_ip))
          AND NOT q.quic_ok
          AND q.start_ns BETWEEN t.start_ns - 3600000000000 AND t.start_ns);
