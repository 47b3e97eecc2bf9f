"""airflow/"""
