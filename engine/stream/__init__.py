"""Spark side of Lacuna. PySpark is imported inside functions only, so that
``import engine`` (and ``import engine.stream``) never starts a JVM."""
