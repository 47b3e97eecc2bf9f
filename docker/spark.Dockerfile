# Spark standalone master/worker with the same PySpark version as mzflow.
# NOT exercised by the test suite: no Docker engine runs on our machines.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-cache-dir 'pyspark>=4.1,<5' 'pandas<3' pyarrow
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 SPARK_NO_DAEMONIZE=1
