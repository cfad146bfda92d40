-- Graph expressions, evaluated over a scope the server unseals and passes in (SQL never
-- holds a key): a node's `if`, `fan_out` items and `concurrency` group, a graph's
-- `output`, `if` and `concurrency`, and the $expr / $template values of node configs.
-- They arrive compiled (cryopg/graphs/expr.py checks them at submit) as jsonb:
-- {"lit": v}, {"path": [k, ...]}, {"op": "==|!=|<|<=|>|>=|and|or", "a": e, "b": e},
-- {"op": "not", "a": e}, {"op": "digest", "a": e} and templates {"tpl": ["text", e, ...]}.
-- tests/expr_vectors.json holds what they give; the Python compiler and the editor's
-- checker (cryopg/ui/static/editor/expr.js) are held to the same vectors.

-- A JSON value taken as a condition: false, null, 0, "" and a missing value are false.
CREATE OR REPLACE FUNCTION cryo._truthy(p_value jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_value IS NULL THEN false
                ELSE CASE jsonb_typeof(p_value)
                        WHEN 'null' THEN false
                        WHEN 'boolean' THEN p_value = 'true'::jsonb
                        WHEN 'number' THEN p_value <> '0'::jsonb
                        WHEN 'string' THEN p_value <> '""'::jsonb
                        ELSE true END END
$$;

-- A digested hole ({"op": "digest"}): 'h_' and 24 hex digits of a SHA-256 of its value.
-- Workflows compiled between issues 20 and 39 rendered the holes of a concurrency group
-- and a state key or entity so; they still do until put again (names now render as
-- text, the cell or lock a script names the same). NULL renders as nothing. Python's
-- twin is cryopg.graphs.document.digest_part.
CREATE OR REPLACE FUNCTION cryo._digest(p_value jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_value IS NULL OR jsonb_typeof(p_value) = 'null' THEN ''
                ELSE 'h_' || left(encode(sha256(convert_to('cryopg-digest/v1|' ||
                    CASE jsonb_typeof(p_value) WHEN 'string' THEN p_value #>> '{}'
                                               ELSE p_value::text END, 'UTF8')), 'hex'), 24)
           END
$$;

-- Evaluates a compiled expression over a scope; a missing path is JSON null.
CREATE OR REPLACE FUNCTION cryo._eval(p_expr jsonb, p_scope jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_a jsonb;
    v_b jsonb;
    v_op text := p_expr ->> 'op';
    v_part jsonb;
    v_text text := '';
BEGIN
    IF p_expr ? 'lit' THEN
        RETURN p_expr -> 'lit';
    ELSIF p_expr ? 'path' THEN
        v_a := p_scope #> ARRAY(SELECT jsonb_array_elements_text(p_expr -> 'path'));
        -- A triggered run's input carries its trigger: `trigger.x` in a node's template
        -- reads `input.trigger.x` when the scope has no trigger of its own (a driver's).
        IF v_a IS NULL AND p_expr #>> '{path,0}' = 'trigger' AND NOT p_scope ? 'trigger' THEN
            v_a := p_scope #> (ARRAY['input'] ||
                               ARRAY(SELECT jsonb_array_elements_text(p_expr -> 'path')));
        END IF;
        -- The driver leaves out the nodes it reads that have not started (they would make
        -- every turn's scope the graph's size): one missing reads as pending.
        IF v_a IS NULL AND p_expr #>> '{path,0}' = 'nodes' AND p_expr #>> '{path,2}' = 'status'
           AND NOT coalesce((p_scope -> 'nodes') ? (p_expr #>> '{path,1}'), false) THEN
            RETURN '"pending"'::jsonb;
        END IF;
        RETURN coalesce(v_a, 'null'::jsonb);
    ELSIF p_expr ? 'tpl' THEN
        FOR v_part IN SELECT * FROM jsonb_array_elements(p_expr -> 'tpl') LOOP
            IF jsonb_typeof(v_part) = 'string' THEN
                v_text := v_text || (v_part #>> '{}');
            ELSE
                v_a := cryo._eval(v_part, p_scope);
                v_text := v_text || CASE jsonb_typeof(v_a) WHEN 'string' THEN v_a #>> '{}'
                                                            WHEN 'null' THEN ''
                                                            ELSE v_a::text END;
            END IF;
        END LOOP;
        RETURN to_jsonb(v_text);
    END IF;
    v_a := cryo._eval(p_expr -> 'a', p_scope);
    IF v_op = 'digest' THEN
        RETURN to_jsonb(cryo._digest(v_a));
    ELSIF v_op = 'not' THEN
        RETURN to_jsonb(NOT cryo._truthy(v_a));
    ELSIF v_op = 'and' THEN
        RETURN to_jsonb(cryo._truthy(v_a) AND cryo._truthy(cryo._eval(p_expr -> 'b', p_scope)));
    ELSIF v_op = 'or' THEN
        RETURN to_jsonb(cryo._truthy(v_a) OR cryo._truthy(cryo._eval(p_expr -> 'b', p_scope)));
    END IF;
    v_b := cryo._eval(p_expr -> 'b', p_scope);
    IF v_op = '==' THEN
        RETURN to_jsonb(v_a = v_b);
    ELSIF v_op = '!=' THEN
        RETURN to_jsonb(v_a <> v_b);
    END IF;
    -- Ordering compares numbers with numbers and strings with strings; else false.
    IF jsonb_typeof(v_a) = 'number' AND jsonb_typeof(v_b) = 'number' THEN
        RETURN to_jsonb(CASE v_op WHEN '<' THEN v_a::numeric < v_b::numeric
                                  WHEN '<=' THEN v_a::numeric <= v_b::numeric
                                  WHEN '>' THEN v_a::numeric > v_b::numeric
                                  WHEN '>=' THEN v_a::numeric >= v_b::numeric END);
    ELSIF jsonb_typeof(v_a) = 'string' AND jsonb_typeof(v_b) = 'string' THEN
        RETURN to_jsonb(CASE v_op WHEN '<' THEN (v_a #>> '{}') < (v_b #>> '{}')
                                  WHEN '<=' THEN (v_a #>> '{}') <= (v_b #>> '{}')
                                  WHEN '>' THEN (v_a #>> '{}') > (v_b #>> '{}')
                                  WHEN '>=' THEN (v_a #>> '{}') >= (v_b #>> '{}') END);
    END IF;
    RETURN 'false'::jsonb;
END
$$;

-- Renders a node config: every {"$expr": e} becomes its value and every
-- {"$template": t} its string; everything else is copied.
CREATE OR REPLACE FUNCTION cryo._render(p_config jsonb, p_scope jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_out jsonb;
BEGIN
    CASE jsonb_typeof(p_config)
    WHEN 'object' THEN
        IF p_config ? '$expr' THEN
            RETURN cryo._eval(p_config -> '$expr', p_scope);
        ELSIF p_config ? '$template' THEN
            RETURN cryo._eval(p_config -> '$template', p_scope);
        END IF;
        SELECT coalesce(jsonb_object_agg(k, cryo._render(v, p_scope)), '{}'::jsonb) INTO v_out
          FROM jsonb_each(p_config) AS e(k, v);
        RETURN v_out;
    WHEN 'array' THEN
        SELECT coalesce(jsonb_agg(cryo._render(v, p_scope) ORDER BY n), '[]'::jsonb) INTO v_out
          FROM jsonb_array_elements(p_config) WITH ORDINALITY AS e(v, n);
        RETURN v_out;
    ELSE
        RETURN p_config;
    END CASE;
END
$$;

CREATE OR REPLACE FUNCTION cryo.eval_expression(p_expr jsonb, p_scope jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT cryo._eval(p_expr, p_scope)
$$;
COMMENT ON FUNCTION cryo.eval_expression(jsonb, jsonb) IS
    'Returns the value of a compiled graph expression over a scope (a missing path is null). Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.render_config(p_config jsonb, p_scope jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT cryo._render(p_config, p_scope)
$$;
COMMENT ON FUNCTION cryo.render_config(jsonb, jsonb) IS
    'Returns a compiled node config with its $expr and $template values rendered over a scope. Raises nothing.';
