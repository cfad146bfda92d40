-- history.replica names the server replica whose connection wrote the row (V0019), from
-- the session setting cryo.replica_id. Any session may set a custom setting, so an
-- application role could SET cryo.replica_id before cryo.submit_run and forge the
-- column. Only the engine's own role (the owner, whom servers connect as, or a role
-- that can become it) may name a replica now. Inside the application's SECURITY
-- DEFINER functions current_user is the owner, so the check reads the role the session
-- logged in as (or SET ROLE to), as cryo._caller() does; the default may not call a
-- cryo function, which a rebuild of the functions would drop with it.
ALTER TABLE cryo.history ALTER COLUMN replica SET DEFAULT
    CASE WHEN pg_catalog.pg_has_role(
                  (CASE WHEN pg_catalog.current_setting('role') = 'none'
                        THEN session_user::text
                        ELSE pg_catalog.current_setting('role') END)::name,
                  current_user, 'MEMBER')
         THEN nullif(pg_catalog.current_setting('cryo.replica_id', true), '')
    END;
