"""The Spark session and the merge kernel that runs in it."""
