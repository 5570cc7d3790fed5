"""What both stream products share on the Spark side: the session, the source seam, the
reading rows, how a query's failure reads. PySpark is imported inside functions only, so
``import engine`` (and ``import engine.stream``) never starts a JVM.

``session``: the one place a SparkSession is built; ``source``: where a query reads
readings from and what it consumed; ``readings``: readings as Spark rows and the backup
filter; ``query_errors``: a query's failure on one line; ``quiet``: py4j's expected noise
kept off stderr; ``fit``: the Gaussian model's moments in one Spark pass.
"""

from engine.stream.query_errors import FAILURE_MARK, SimulatedFailure, query_failure_line
from engine.stream.session import SparkSettings, get_spark
from engine.stream.source import LandingDirSource, StreamSource

__all__ = [
    "FAILURE_MARK",
    "LandingDirSource",
    "SimulatedFailure",
    "SparkSettings",
    "StreamSource",
    "get_spark",
    "query_failure_line",
]
