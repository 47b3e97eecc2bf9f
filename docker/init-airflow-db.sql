CREATE DATABASE airflow OWNER mzflow;
