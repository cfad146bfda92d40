-- Database roles, applied after every other function file (so after each rebuild).
--
-- cryo_app: what an application's own login role is granted. It may call the public
-- functions an application needs (submit, cancel, read runs, signal, publish) and read
-- the views, and nothing else: no table privilege at all. Those functions run as
-- SECURITY DEFINER with a fixed search_path, so they reach the tables as the schema
-- owner while the caller cannot. pg_catalog comes first in that path, so no object of
-- the caller's (or of cryo) may stand in for a built-in. A member of cryo_app is also
-- held to the tenant cryo.bind_app_role gave it (cryo._app_tenant_check at the top of
-- each of those functions, cryo._app_tenant() in every view), and to nothing without one.
-- cryo_dba: read-only, on the views.
-- Roles are cluster-wide, so they are created once and only when missing; a migrating
-- role without CREATEROLE skips them with a notice and the grants that need them.

DO $roles$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['cryo_app', 'cryo_dba'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN
                    NULL;  -- another database of the cluster created it meanwhile
                WHEN insufficient_privilege THEN
                    RAISE NOTICE 'cryopg: cannot create role % (no CREATEROLE); skipping its grants', v_role;
            END;
        END IF;
    END LOOP;
END
$roles$;

DO $grants$
DECLARE
    v_fn regprocedure;
    v_view regclass;
    v_app boolean := EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cryo_app');
    v_dba boolean := EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cryo_dba');
BEGIN
    -- Functions are executable by PUBLIC by default; in this schema nothing is.
    EXECUTE 'REVOKE ALL ON ALL FUNCTIONS IN SCHEMA cryo FROM PUBLIC';
    -- The application's functions.
    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'cryo'
           AND p.proname IN ('submit_run', 'cancel_run', 'get_run', 'list_runs', 'read_history',
                             'send_signal', 'publish_event', 'error_codes', 'queue_position',
                             -- artifacts: an application sharing the store indexes and reads
                             'prepare_artifact', 'put_artifact', 'find_artifact',
                             'list_artifacts', 'artifact_usage')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, cryo, pg_temp', v_fn);
        IF v_app THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO cryo_app', v_fn);
        END IF;
    END LOOP;
    -- The views call cryo.now() (which may ask cryo._test_clock()) and cryo._app_tenant(),
    -- and a view's functions are checked against its reader. cryo.is_terminal is granted
    -- as it is, not as SECURITY DEFINER: a definer function is never inlined, and it sits
    -- on the hottest paths. The two helpers are definer functions that read one fact each.
    IF v_app THEN
        EXECUTE 'GRANT USAGE ON SCHEMA cryo TO cryo_app';
        EXECUTE 'GRANT EXECUTE ON FUNCTION cryo.now(), cryo.is_terminal(text), cryo._test_clock(), '
                'cryo._app_tenant() TO cryo_app';
    END IF;
    IF v_dba THEN
        EXECUTE 'GRANT USAGE ON SCHEMA cryo TO cryo_dba';
        EXECUTE 'GRANT EXECUTE ON FUNCTION cryo.now(), cryo.error_codes(), cryo._test_clock(), '
                'cryo._app_tenant() TO cryo_dba';
    END IF;
    FOR v_view IN
        SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'cryo' AND c.relkind = 'v'
    LOOP
        IF v_app THEN
            EXECUTE format('GRANT SELECT ON %s TO cryo_app', v_view);
        END IF;
        IF v_dba THEN
            EXECUTE format('GRANT SELECT ON %s TO cryo_dba', v_view);
        END IF;
    END LOOP;
END
$grants$;
