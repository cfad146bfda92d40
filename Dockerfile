# cryopg server / agent / migrate image. The checkout is installed editable so the
# package reads sql/ from /app, exactly as in development.
FROM python:3.11-slim

# gcc + libpq-dev: pgmigrate's psycopg2 builds from source; bubblewrap confines untrusted
# runs (an agent without it takes none).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libpq-dev bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . /app
# PYTHONPATH as well as -e: every top-level package of the checkout imports from /app.
ENV PYTHONPATH=/app
# compat mode: a plain path entry, not the editable finder (~13 ms per in-script verb);
# bytecode compiled now, since the cryo user cannot write it under /app later.
RUN pip install --no-cache-dir -e '.[fast]' --config-settings editable_mode=compat \
    && python -m compileall -q cryopg agent sdks/python \
    && useradd --create-home --uid 1000 cryo

# The agent runs user scripts: never as root.
USER cryo
ENTRYPOINT ["cryopg"]
CMD ["--help"]
