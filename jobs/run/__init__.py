"""Running a job: inputs, the run model both engines share, the local and Spark engines."""
