# cryopg server / agent / migrate image. The checkout is installed editable so the
# package reads sql/ from /app, exactly as in development.
FROM python:3.11-slim

# gcc + libpq-dev: pgmigrate's psycopg2 builds from source.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libpq-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY . /app
# PYTHONPATH as well as -e: every top-level package of the checkout imports from /app.
ENV PYTHONPATH=/app
RUN pip install --no-cache-dir -e . \
    && useradd --create-home --uid 1000 cryo

# The agent runs user scripts: never as root.
USER cryo
ENTRYPOINT ["cryopg"]
CMD ["--help"]
